//! The options a tool's `-h` or `--help` lists, for the tests that compare
//! its man page (man.rs) and its guide (guide.rs) with them.

/// One option: its names and the argument it takes.
#[derive(Debug)]
pub struct Opt {
    /// `-d`, `--device`: the short name first, as help gives them.
    pub names: Vec<String>,
    /// `PATH` for `<PATH>`.
    pub arg: Option<String>,
}

impl Opt {
    /// Its names joined by `sep` and its argument: `-d, --device PATH` as
    /// help and the guide's heading name it (`, `), `-d|--device PATH` as
    /// a man page's SYNOPSIS does (`|`).
    pub fn spec(&self, sep: &str) -> String {
        let mut s = self.names.join(sep);
        if let Some(a) = &self.arg {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// Every option `help` lists, such as `-d, --device <PATH>`, `-e`,
/// `-v, --verbose...` (a repeatable flag) or `--ignore <KIND[,KIND...]>`.
pub fn options(help: &str) -> Vec<Opt> {
    help.lines()
        .filter_map(|line| {
            let t = line.trim_start();
            // Options start at column 2, or 6 when there is no short name;
            // their explanations are indented further.
            if !t.starts_with('-') || !matches!(line.len() - t.len(), 2 | 6) {
                return None;
            }
            let spec = t.split("  ").next().unwrap_or(t).trim_end_matches("...");
            let (names, arg) = match spec.split_once(" <") {
                Some((n, a)) => (n, a.strip_suffix('>').map(str::to_owned)),
                None => (spec, None),
            };
            let names = names.split(", ").map(str::to_owned).collect();
            Some(Opt { names, arg })
        })
        .collect()
}
