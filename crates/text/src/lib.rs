//! The text forms of btrfs names and byte strings that rdump, rreceive and
//! rsend print or store, written in one place so that they agree:
//!
//! - [`escape`]: names and paths escaped as `btrfs receive --dump` prints
//!   them (rdump's text, `rreceive --list`, `rsend --changes`);
//! - [`hex`]: lowercase hex and its inverse (rreceive's state, journals and
//!   reserved names);
//! - [`plain_io`]: an I/O error in words, without the OS's "(os error N)"
//!   (every tool's messages and its library's errors);
//! - [`list`]: the lines of `rreceive --list`, which `rsend --parent-from`
//!   reads;
//! - [`mountinfo`]: the kernel's mount table (rsend's mounted paths,
//!   rreceive's mount root);
//! - `json` (feature `json`): a byte string as a JSON value, losslessly (the
//!   `--json` forms of the three tools).
//!
//! A layer of its own beneath the tools: it knows nothing of streams,
//! filesystems or terminals.

pub mod escape;
pub mod hex;
mod io_error;
#[cfg(feature = "json")]
pub mod json;
pub mod list;
pub mod mountinfo;

pub use io_error::plain_io;
