//! What every tool's command line does besides its own work: how it ends
//! ([`exit`]: the error on standard error and the exit code, the same for
//! rsend, rreceive and rdump), and shell completion scripts and the man
//! page, both generated from the tool's [`clap::Command`], so they never
//! drift from its flags.
//!
//! A `main.rs` whose `Args` derives [`clap::Parser`] flattens [`ExtraArgs`]
//! into it and hands its work to [`run`], which parses the command line,
//! prints what [`ExtraArgs`] asks for ([`print()`]) and reports how the
//! work ended ([`exit`]):
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! #[command(name = "rdump")]
//! struct Args {
//!     #[command(flatten)]
//!     extra: rsend_cli::ExtraArgs,
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     rsend_cli::run("rdump", |a: &Args| &a.extra, |_args| {
//!         // ... the tool's own work ...
//!         Ok(())
//!     })
//! }
//! ```

use std::io::{self, Write};
use std::process::ExitCode;

use clap_complete::Generator;
pub use clap_complete::Shell;

/// Something to print instead of the tool's own work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// The completion script for this shell.
    Completions(Shell),
    /// The man page (section 1), in roff.
    Man,
}

/// The `--completions SHELL` and `--man` flags, to `#[command(flatten)]`
/// into a tool's arguments. Both are left out of `-h` and documented in
/// `--help` and the man page, where [`command`] names the files the
/// packages and `scripts/install.sh` install for the tool.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ExtraArgs {
    /// Print the completion script for SHELL to standard output and exit
    #[arg(long, value_name = "SHELL", hide_short_help = true)]
    pub completions: Option<Shell>,
    /// Print this manual page (roff) to standard output and exit
    #[arg(long, hide_short_help = true, conflicts_with = "completions")]
    pub man: bool,
}

/// The long help of `--completions` for `tool`: where the Debian packages
/// (`packaging/build-debs`) and `scripts/install.sh` (PREFIX /usr/local)
/// put its completion scripts, one path a line (indented: in the man page
/// each starts a line of its own).
fn completions_help(tool: &str) -> String {
    format!(
        "Print the completion script for SHELL to standard output and exit\n\n\
         The packages install those of bash, zsh and fish as\n\
         \x20 /usr/share/bash-completion/completions/{tool}\n\
         \x20 /usr/share/zsh/vendor-completions/_{tool}\n\
         \x20 /usr/share/fish/vendor_completions.d/{tool}.fish\n\n\
         scripts/install.sh installs them as\n\
         \x20 /usr/local/share/bash-completion/completions/{tool}\n\
         \x20 /usr/local/share/zsh/site-functions/_{tool}\n\
         \x20 /usr/local/share/fish/vendor_completions.d/{tool}.fish"
    )
}

/// The long help of `--man` for `tool`: how to read the page, and where the
/// packages and `scripts/install.sh` put it.
fn man_help(tool: &str) -> String {
    format!(
        "Print this manual page (roff) to standard output and exit\n\n\
         Read it with `{tool} --man | man -l -`. The packages install it as\n\
         \x20 /usr/share/man/man1/{tool}.1.gz\n\n\
         scripts/install.sh installs it as\n\
         \x20 /usr/local/share/man/man1/{tool}.1"
    )
}

/// The command line of `A`, a tool's arguments with [`ExtraArgs`]
/// flattened in, its `--completions` and `--man` help naming the tool's
/// own files (`/usr/share/man/man1/rsend.1.gz`, ...). [`run`] parses with
/// it and prints its help, completions and man page.
pub fn command<A: clap::CommandFactory>() -> clap::Command {
    let cmd = A::command();
    let tool = cmd.get_name().to_owned();
    cmd.mut_arg("completions", |a| a.long_help(completions_help(&tool)))
        .mut_arg("man", |a| a.long_help(man_help(&tool)))
}

/// The text of a tool's `-q` and `-v`, for [`Verbosity`].
pub trait VerbosityHelp {
    /// `-q, --quiet`.
    const QUIET: &'static str;
    /// `-v, --verbose` (repeatable).
    const VERBOSE: &'static str;
}

/// The `-q` and `-v` flags, to `#[command(flatten)]` into a tool's
/// arguments (their help from `H`), counted as btrfs-progs counts them: one
/// level that starts at the default, each `-v` raises by one and `-q` sets
/// to quiet, in the order given. So `-v -q` is quiet, `-q -v` the default
/// and `-q -v -v` as `-v`, as for `btrfs send` and `btrfs receive`.
pub struct Verbosity<H> {
    /// 0 quiet, 1 the default, 2 with one `-v` more, ...
    level: u8,
    help: std::marker::PhantomData<fn() -> H>,
}

impl<H> Verbosity<H> {
    /// The level of the flags given in this order (`true` for `-v`,
    /// `false` for `-q`).
    pub fn of_flags(flags: impl IntoIterator<Item = bool>) -> Verbosity<H> {
        let level = flags.into_iter().fold(1u8, |level, verbose| match verbose {
            true => level.saturating_add(1),
            false => 0,
        });
        Verbosity {
            level,
            help: std::marker::PhantomData,
        }
    }

    /// 0 with `-q` last, 1 by default, one more for each `-v` after it.
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Nothing but errors (`-q`, not followed by a `-v`).
    pub fn quiet(&self) -> bool {
        self.level == 0
    }

    /// How many levels above the default (`-v` once: 1).
    pub fn verbose(&self) -> u8 {
        self.level.saturating_sub(1)
    }
}

impl<H> Default for Verbosity<H> {
    fn default() -> Self {
        Verbosity::of_flags([])
    }
}

impl<H> Clone for Verbosity<H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H> Copy for Verbosity<H> {}

impl<H> std::fmt::Debug for Verbosity<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbosity")
            .field("level", &self.level)
            .finish()
    }
}

impl<H> clap::FromArgMatches for Verbosity<H> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        // Where each flag was given: the order decides.
        let at = |id: &str| -> Vec<usize> {
            match m.value_source(id) {
                Some(clap::parser::ValueSource::CommandLine) => {
                    m.indices_of(id).map(|i| i.collect()).unwrap_or_default()
                }
                _ => Vec::new(),
            }
        };
        let mut flags: Vec<(usize, bool)> = at("quiet")
            .into_iter()
            .map(|i| (i, false))
            .chain(at("verbose").into_iter().map(|i| (i, true)))
            .collect();
        flags.sort_unstable();
        Ok(Verbosity::of_flags(flags.into_iter().map(|(_, v)| v)))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<H: VerbosityHelp> clap::Args for Verbosity<H> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // Each flag given is a value of its own, so that every one has
        // its place on the command line (a counted flag keeps only its
        // last place, and one place for `-vv`).
        let flag = |id: &'static str, short: char, help: &'static str| {
            clap::Arg::new(id)
                .short(short)
                .long(id)
                .action(clap::ArgAction::Append)
                .num_args(0)
                .default_missing_value(id)
                .help(help)
        };
        cmd.arg(flag("quiet", 'q', H::QUIET))
            .arg(flag("verbose", 'v', H::VERBOSE))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl ExtraArgs {
    /// What the flags ask for, if anything.
    pub fn requested(&self) -> Option<Extra> {
        match (self.completions, self.man) {
            (Some(shell), _) => Some(Extra::Completions(shell)),
            (None, true) => Some(Extra::Man),
            (None, false) => None,
        }
    }
}

/// After-help headings that become man page sections, each with the lines
/// below it kept as laid out.
const SECTIONS: [(&str, &str); 3] = [
    ("Examples:", "EXAMPLES"),
    ("Exit status:", "EXIT STATUS"),
    ("See also:", "SEE ALSO"),
];

/// Writes `what` for the command line `cmd` (such as `Args::command()`) to
/// `out`. Completions are for the program named by `cmd`'s name.
///
/// In the man page, the SYNOPSIS names every option with its argument
/// (`[-d|--device PATH]...`), and the after-help text (`after_long_help`,
/// else `after_help`) is cut at the lines `Examples:`, `Exit status:` and
/// `See also:` into the EXAMPLES, EXIT STATUS and SEE ALSO sections; text
/// before the first of them becomes clap_mangen's EXTRA section.
pub fn extra(mut cmd: clap::Command, what: &Extra, out: &mut dyn Write) -> io::Result<()> {
    match *what {
        Extra::Completions(shell) => {
            let name = cmd.get_name().to_owned();
            cmd.set_bin_name(name);
            cmd.build();
            // Generated whole first: the generators' infallible entry points
            // panic on a write error, such as a closed pipe.
            let mut script = Vec::new();
            shell.try_generate(&cmd, &mut script)?;
            out.write_all(&script)
        }
        Extra::Man => out.write_all(manual(cmd)?.as_bytes()),
    }
}

/// The man page of `cmd`, in roff.
fn manual(mut cmd: clap::Command) -> io::Result<String> {
    cmd.build();
    let after = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (extra, sections) = after_sections(&after);
    let cmd = match extra.trim().is_empty() {
        true => cmd.after_long_help(None::<&'static str>),
        false => cmd.after_long_help(extra.trim_end().to_owned()),
    }
    .after_help(None::<&'static str>);
    let man = clap_mangen::Man::new(cmd.clone());

    // Each part is rendered with roff's preamble; it is kept once.
    let preamble = roff::Roff::new().render();
    let mut page = String::new();
    let mut add = |render: &dyn Fn(&mut Vec<u8>) -> io::Result<()>| -> io::Result<()> {
        let mut buf = Vec::new();
        render(&mut buf)?;
        let text = String::from_utf8(buf).map_err(io::Error::other)?;
        let body = match page.is_empty() {
            true => text.as_str(),
            false => text.strip_prefix(&preamble).unwrap_or(&text),
        };
        page.push_str(body);
        Ok(())
    };
    add(&|w| man.render_title(w))?;
    add(&|w| man.render_name_section(w))?;
    add(&|w| w.write_all(synopsis(&cmd).as_bytes()))?;
    add(&|w| man.render_description_section(w))?;
    add(&|w| man.render_options_section(w))?;
    if !extra.trim().is_empty() {
        add(&|w| man.render_extra_section(w))?;
    }
    for (heading, body) in &sections {
        add(&|w| {
            let mut roff = roff::Roff::new();
            roff.control("SH", [*heading]).control("nf", []);
            for line in body.trim_end().lines() {
                roff.text([roff::roman(line)]);
            }
            roff.control("fi", []);
            roff.to_writer(w)
        })?;
    }
    if cmd.get_version().is_some() {
        add(&|w| man.render_version_section(w))?;
    }
    Ok(page)
}

/// `after` cut at the [`SECTIONS`] headings: the text before the first,
/// and each section's man heading with its lines, in their order.
fn after_sections(after: &str) -> (String, Vec<(&'static str, String)>) {
    let mut extra = String::new();
    let mut sections: Vec<(&'static str, String)> = Vec::new();
    for line in after.lines() {
        let heading = SECTIONS
            .iter()
            .find(|(h, _)| line.trim_end() == *h)
            .map(|(_, man)| *man);
        match (heading, sections.last_mut()) {
            (Some(man), _) => sections.push((man, String::new())),
            (None, Some((_, body))) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {
                extra.push_str(line);
                extra.push('\n');
            }
        }
    }
    (extra, sections)
}

/// Stands for roff's unbreakable space (`\\ `) in text given to the roff
/// crate, which escapes backslashes; replaced once rendered.
const UNBREAKABLE: char = '\u{e000}';
/// Stands for roff's zero-width `\\&`, which keeps a line that ends in
/// `...` from being taken as a sentence's end (two spaces after it).
const NO_SENTENCE_END: char = '\u{e001}';

/// The SYNOPSIS section, in roff: the tool, each visible option with its
/// argument (`...` after one that repeats), then the positional
/// arguments, each kept whole on a line (`.SY`, as groff's man pages do).
fn synopsis(cmd: &clap::Command) -> String {
    use clap::ArgAction;
    use roff::{bold, italic, roman};
    let value = |arg: &clap::Arg| -> String {
        match arg.get_value_names() {
            Some(names) => names.join(" "),
            None => arg.get_id().as_str().to_uppercase(),
        }
    };
    let repeats = |arg: &clap::Arg| {
        matches!(arg.get_action(), ArgAction::Append | ArgAction::Count)
            || arg.get_num_args().is_some_and(|n| n.max_values() > 1)
    };
    let mut roff = roff::Roff::new();
    roff.control("SH", ["SYNOPSIS"])
        .control("SY", [cmd.get_name()]);
    let options = cmd.get_arguments().filter(|a| !a.is_positional());
    for arg in options
        .chain(cmd.get_positionals())
        .filter(|a| !a.is_hide_set())
    {
        let (open, close) = match arg.is_required_set() {
            true => ("", ""),
            false => ("[", "]"),
        };
        let mut line = vec![roman(open)];
        if arg.is_positional() {
            line.push(italic(value(arg)));
        } else {
            let names = arg
                .get_short()
                .map(|s| format!("-{s}"))
                .into_iter()
                .chain(arg.get_long().map(|l| format!("--{l}")));
            for (i, name) in names.enumerate() {
                if i > 0 {
                    line.push(roman("|"));
                }
                line.push(bold(name));
            }
            if arg.get_num_args().is_some_and(|n| n.takes_values()) {
                line.push(roman(UNBREAKABLE.to_string()));
                line.push(italic(value(arg)));
            }
        }
        line.push(roman(close));
        if repeats(arg) {
            line.push(roman(format!("...{NO_SENTENCE_END}")));
        }
        roff.text(line);
    }
    roff.control("YS", []);
    roff.render()
        .replace(UNBREAKABLE, "\\ ")
        .replace(NO_SENTENCE_END, "\\&")
}

/// Writes `what` for `cmd` to standard output, the whole of a `main` that
/// was asked for it: 0 when written (or when the reader closed the pipe
/// early), 1 with a message on standard error when writing failed.
pub fn print(cmd: clap::Command, what: &Extra) -> ExitCode {
    let name = cmd.get_name().to_owned();
    let mut stdout = io::stdout().lock();
    match extra(cmd, what, &mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: write error: {e}");
            ExitCode::from(1)
        }
    }
}

/// How a tool's run failed, for [`exit`].
#[derive(Debug)]
pub enum Failure {
    /// clap found the command line wrong (or was asked for `--help`,
    /// `--version`): clap's text, exit code 2 (0 for help and version).
    Clap(clap::Error),
    /// The command line is wrong in a way clap does not check: exit code
    /// 2, after `TOOL: error: ` and this message.
    Usage(String),
    /// The work failed: exit code 1, after `TOOL: error: ` and the error
    /// with each of its causes that its message does not already say.
    Error(anyhow::Error),
    /// The tool said what went wrong itself (such as the differences
    /// `rsend --verify` lists): this exit code and nothing more.
    Said(u8),
}

impl Failure {
    /// An error said by its message alone (its causes are in it already).
    pub fn msg(message: impl std::fmt::Display) -> Failure {
        Failure::Error(anyhow::Error::msg(message.to_string()))
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Error(e)
    }
}

impl From<clap::Error> for Failure {
    fn from(e: clap::Error) -> Failure {
        Failure::Clap(e)
    }
}

/// How every tool ends: for a failure of the tool named `tool`, prints it
/// to standard error (`rsend: error: ...`) and chooses the exit code: 0
/// for success, 1 for an error, 2 for a wrong command line.
pub fn exit(tool: &str, r: Result<(), Failure>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Clap(e)) => {
            let _ = e.print();
            // 2, or 0 for --help and --version.
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
        Err(Failure::Usage(msg)) => {
            say_error(tool, msg);
            ExitCode::from(2)
        }
        Err(Failure::Error(e)) => {
            say_error(tool, said_once(&e));
            ExitCode::from(1)
        }
        Err(Failure::Said(code)) => ExitCode::from(code),
    }
}

/// The whole of a tool's `main`: parses the command line into `A`
/// (whose [`ExtraArgs`] `extra` finds) with [`command`], prints
/// completions or the man page when asked, else runs `work`; ends as
/// [`exit`] says.
pub fn run<A: clap::Parser, E: Ending>(
    tool: &str,
    extra: impl FnOnce(&A) -> &ExtraArgs,
    work: impl FnOnce(A) -> E,
) -> ExitCode {
    let mut cmd = command::<A>();
    let args = match cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| A::from_arg_matches_mut(&mut m))
    {
        Ok(args) => args,
        Err(e) => return exit(tool, Err(e.format(&mut cmd).into())),
    };
    if let Some(what) = extra(&args).requested() {
        return print(cmd, &what);
    }
    work(args).end(tool)
}

/// How a tool's work ends, for [`run`]: a result [`exit`] reports, or an
/// exit code from work that reported through [`exit`] itself.
pub trait Ending {
    /// The exit code, once what went wrong is said.
    fn end(self, tool: &str) -> ExitCode;
}

impl Ending for Result<(), Failure> {
    fn end(self, tool: &str) -> ExitCode {
        exit(tool, self)
    }
}

impl Ending for ExitCode {
    fn end(self, _tool: &str) -> ExitCode {
        self
    }
}

/// Refuses to read a stream from standard input when it is a terminal: a
/// person typing cannot give one, and waiting for it would look like a
/// hang. `hint` says how to give the tool a stream (such as `pipe one in
/// (rsend ... | rreceive DEST) or name a stream file with -f FILE`).
pub fn stream_from_stdin(hint: &str) -> Result<(), Failure> {
    use std::io::IsTerminal;
    if !io::stdin().is_terminal() {
        return Ok(());
    }
    Err(Failure::Usage(format!(
        "standard input is a terminal, not a send stream: {hint}"
    )))
}

/// Prints `TOOL: error: MESSAGE` to standard error, as [`exit`] does, for
/// a tool that says more after it (and then ends with [`Failure::Said`]).
pub fn say_error(tool: &str, message: impl std::fmt::Display) {
    eprintln!("{tool}: error: {message}");
}

/// `e` and its causes, each said once (a cause whose text is already in
/// the message is not repeated).
fn said_once(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A tool with one flag of its own.
    #[derive(Parser)]
    #[command(name = "demo", about = "A demonstration tool.")]
    struct Args {
        /// Be loud.
        #[arg(long)]
        loud: bool,
        /// A device.
        #[arg(short, long, value_name = "PATH")]
        device: Vec<String>,
        /// Files.
        files: Vec<String>,
        #[command(flatten)]
        extra: ExtraArgs,
    }

    fn render(what: Extra) -> String {
        let mut out = Vec::new();
        extra(command::<Args>(), &what, &mut out).expect("render");
        String::from_utf8(out).expect("utf-8")
    }

    struct Said;
    impl VerbosityHelp for Said {
        const QUIET: &'static str = "Say nothing";
        const VERBOSE: &'static str = "Say more";
    }

    /// A tool with `-q` and `-v`.
    #[derive(Parser)]
    #[command(name = "talker")]
    struct Talker {
        /// A file.
        #[arg(short = 'f')]
        file: Option<String>,
        #[command(flatten)]
        verbosity: Verbosity<Said>,
    }

    #[test]
    fn q_and_v_set_one_level_in_their_order_as_btrfs_progs_does() {
        // btrfs send and btrfs receive (btrfs-progs 6.14): -q sets quiet,
        // -v raises the level by one (the first from the default).
        for (argv, level) in [
            (&[][..], 1),
            (&["-q"][..], 0),
            (&["-v"][..], 2),
            (&["-vv"][..], 3),
            (&["-v", "-q"][..], 0),
            (&["-q", "-v"][..], 1),
            (&["-q", "-v", "-v"][..], 2),
            (&["-qv"][..], 1),
            (&["-vq"][..], 0),
            (&["-v", "-q", "-v", "-q"][..], 0),
            (&["-q", "-q", "-v"][..], 1),
            (&["--verbose", "-f", "x", "--quiet", "-v"][..], 1),
        ] {
            let t = Talker::try_parse_from(std::iter::once("talker").chain(argv.iter().copied()))
                .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            assert_eq!(t.verbosity.level(), level, "{argv:?}");
            assert_eq!(t.verbosity.quiet(), level == 0, "{argv:?}");
        }
        let help = Talker::command().render_help().to_string();
        assert!(
            help.contains("-q, --quiet  ") && help.contains("Say nothing"),
            "{help}"
        );
        assert!(
            help.contains("-v, --verbose  ") && help.contains("Say more"),
            "{help}"
        );
    }

    #[test]
    fn every_shell_completes_the_tools_own_flag() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let s = render(Extra::Completions(shell));
            assert!(s.contains("loud"), "{shell}: {s}");
            assert!(s.contains("demo"), "{shell}: {s}");
        }
    }

    #[test]
    fn man_page_is_roff_with_name_and_options() {
        let s = render(Extra::Man);
        assert!(s.contains("\n.TH demo 1"), "{s}");
        assert!(s.contains("\n.SH OPTIONS\n"), "{s}");
        assert!(s.contains("\\fB\\-\\-loud\\fR\nBe loud"), "{s}");
        // Hidden from -h, but the man page still explains them.
        assert!(
            s.contains("\\fB\\-\\-man\\fR\nPrint this manual page"),
            "{s}"
        );
        assert!(s.contains("Print the completion script for SHELL"), "{s}");
        // The tool's own files, where the packages put them.
        for path in [
            "/usr/share/man/man1/demo.1.gz",
            "/usr/share/bash\\-completion/completions/demo\n",
            "/usr/share/zsh/vendor\\-completions/_demo",
            "/usr/share/fish/vendor_completions.d/demo.fish",
        ] {
            assert!(s.contains(path), "{path}: {s}");
        }
        assert!(!s.contains("TOOL"), "{s}");
    }

    #[test]
    fn examples_after_help_becomes_an_examples_section_kept_as_laid_out() {
        let cmd = Args::command().after_long_help("Examples:\n  Be loud:\n    demo --loud");
        let mut out = Vec::new();
        extra(cmd, &Extra::Man, &mut out).expect("render");
        let s = String::from_utf8(out).expect("utf-8");
        assert!(
            s.contains("\n.SH EXAMPLES\n.nf\n  Be loud:\n    demo \\-\\-loud\n.fi\n"),
            "{s}"
        );
        assert!(!s.contains("EXTRA"), "{s}");

        let cmd = Args::command().after_long_help("See also btrfs-send(8).");
        let mut out = Vec::new();
        extra(cmd, &Extra::Man, &mut out).expect("render");
        let s = String::from_utf8(out).expect("utf-8");
        assert!(
            s.contains("\n.SH EXTRA\nSee also btrfs\\-send(8).\n"),
            "{s}"
        );
    }

    #[test]
    fn synopsis_gives_each_option_its_argument() {
        let s = render(Extra::Man);
        let synopsis = s.split_once("\n.SH SYNOPSIS\n").expect("SYNOPSIS").1;
        let synopsis = synopsis.split_once("\n.SH ").expect("more").0;
        for want in [
            ".SY demo\n",
            "\n[\\fB\\-\\-loud\\fR]\n",
            "\n[\\fB\\-d\\fR|\\fB\\-\\-device\\fR\\ \\fIPATH\\fR]...\\&\n",
            "\n[\\fB\\-\\-completions\\fR\\ \\fISHELL\\fR]\n",
            "\n[\\fIFILES\\fR]...\\&\n.YS",
        ] {
            assert!(synopsis.contains(want), "{want} in {synopsis}");
        }
    }

    #[test]
    fn after_help_headings_become_sections_in_their_order() {
        let cmd = Args::command().after_long_help(
            "Examples:\n  Be loud:\n    demo --loud\n\nExit status:\n  0  fine\n  1  not\n\n\
             See also:\n  other(1)",
        );
        let mut out = Vec::new();
        extra(cmd, &Extra::Man, &mut out).expect("render");
        let s = String::from_utf8(out).expect("utf-8");
        assert!(
            s.contains(
                "\n.SH EXAMPLES\n.nf\n  Be loud:\n    demo \\-\\-loud\n.fi\n\
                 .SH \"EXIT STATUS\"\n.nf\n  0  fine\n  1  not\n.fi\n\
                 .SH \"SEE ALSO\"\n.nf\n  other(1)\n.fi\n"
            ),
            "{s}"
        );
        // roff's preamble once, at the top.
        assert_eq!(s.matches(".ds Aq").count(), 2, "{s}");
        assert!(!s.contains("EXTRA"), "{s}");
    }

    #[test]
    fn flags_parse_into_a_request() {
        let req = |argv: &[&str]| Args::try_parse_from(argv).map(|a| a.extra.requested());
        assert_eq!(req(&["demo"]).unwrap(), None);
        assert_eq!(req(&["demo", "--man"]).unwrap(), Some(Extra::Man));
        assert_eq!(
            req(&["demo", "--completions", "fish"]).unwrap(),
            Some(Extra::Completions(Shell::Fish))
        );
        let err = req(&["demo", "--completions", "nosuchshell"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    /// Fails every write, as a full disk does.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_errors_are_returned_not_panicked() {
        for what in [Extra::Man, Extra::Completions(Shell::Bash)] {
            let err = extra(Args::command(), &what, &mut Full).unwrap_err();
            assert_eq!(err.to_string(), "disk full");
        }
    }

    #[test]
    fn causes_are_said_once() {
        let e = anyhow::anyhow!("disk full").context("writing the stream");
        assert_eq!(said_once(&e), "writing the stream: disk full");
        let e = anyhow::anyhow!("disk full").context("writing the stream: disk full");
        assert_eq!(said_once(&e), "writing the stream: disk full");
    }

    #[test]
    fn exit_codes() {
        let code = |r| format!("{:?}", exit("demo", r));
        assert_eq!(code(Ok(())), format!("{:?}", ExitCode::SUCCESS));
        assert_eq!(
            code(Err(Failure::msg("bad"))),
            format!("{:?}", ExitCode::from(1))
        );
        assert_eq!(
            code(Err(Failure::Usage("no NAME".into()))),
            format!("{:?}", ExitCode::from(2))
        );
        assert_eq!(
            code(Err(Failure::Said(3))),
            format!("{:?}", ExitCode::from(3))
        );
        let Err(usage) = Args::try_parse_from(["demo", "--nosuchflag"]) else {
            panic!("an unknown flag parsed");
        };
        assert_eq!(code(Err(usage.into())), format!("{:?}", ExitCode::from(2)));
    }
}
