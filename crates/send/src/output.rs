//! Where a send stream may go: anywhere but a terminal.

use std::io::IsTerminal;

/// A send stream was about to be written to a terminal.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0} is a terminal; refusing to write a binary send stream to it (use -f FILE or redirect standard output)"
)]
pub struct TerminalOutput(pub String);

/// Whether a send stream may go to `f` (named `what` in the error): never
/// to a terminal.
pub fn refuse_terminal(f: &impl IsTerminal, what: &str) -> Result<(), TerminalOutput> {
    if f.is_terminal() {
        return Err(TerminalOutput(what.to_string()));
    }
    Ok(())
}
