//! Applying each command to the subvolume being received, with btrfs-progs
//! receive semantics (send-stream.md §6.1), confined beneath that subvolume.
//!
//! Speed: the file last created or written stays open, and WRITE, CLONE,
//! TRUNCATE, CHOWN, CHMOD, UTIMES and xattrs on it use that descriptor.
//! Directory descriptors are cached by path ([`Resolver`](crate::path::Resolver)). A MKFILE, MKDIR
//! or other create at an orphan name that the very next command renames is
//! done at the final name directly: one directory operation instead of two.
//! A TRUNCATE to the size the file already has is skipped.
//!
//! A new file whose commands all came (create, rename, data, owner, mode,
//! times: a "recipe") waits in a batch with the following ones; the batch is
//! created grouped by directory, in stream order within each directory, when
//! it is full or before any other kind of command. After its create, such a
//! file is finished (data, owner, mode, times) and closed on other threads
//! ([`Closer`](crate::closer::Closer)), through its descriptor. A later command naming it waits
//! for that first; a RENAME waits for the files beneath what it moves, END
//! and failures for everything. All path resolution stays on this thread.
//!
//! An ENCODED_WRITE that must be decompressed is checked and its file
//! opened here; the decompressing and writing run on worker threads, one
//! per core ([`crate::decode`]). Only more ENCODED_WRITEs to the same file,
//! at other ranges, go by before they are done: any other command, a
//! checkpoint, END and a failure wait for them first, and the journal
//! counts none of them applied until then.
//!
//! What each command means is apart from how it is scheduled and from
//! recovery. The engine's modules, bottom first:
//!
//! - `held` (a held-back create, plain data), `dirtimes` (directory times
//!   held until END);
//! - `current`: the engine's state: the [`Receiver`] and the subvolume
//!   being received, each concern one value (held creates, work away on
//!   other threads, data sources, what comes later, the snapshot strategy,
//!   recovery), and the helpers every verb uses;
//! - the verbs, each `impl Receiver`: `lifecycle` (SUBVOL, SNAPSHOT, END),
//!   `create`, `names` (RENAME, LINK, UNLINK, RMDIR), `inode` (owner,
//!   mode, times, xattrs, flags), `data`; `batch` holds creates back and
//!   makes them together; `schedule` decides what waits for the closing
//!   thread and holds back directory times; `guard` is the engine's side
//!   of the snapshot room; `recover`, `durable`, `resume` and `stored` its
//!   side of the recovery room (the calls before and after each command,
//!   checkpoints, reopening a subvolume, a stream file read again);
//! - `engine`: [`Receiver::apply`], one command through its steps: the
//!   recovery room before it ([`Receiver::recovery_before`]), the held
//!   create and the batch, the closing thread, the snapshot room's guard,
//!   the verb, the recovery room after it.
//!
//! The verbs call `current` and the rooms, never `engine`; no module
//! names this one's items, only its siblings'.

mod batch;
mod create;
mod current;
mod data;
mod dirtimes;
mod durable;
mod engine;
mod guard;
mod held;
mod inode;
mod lifecycle;
mod names;
mod recover;
mod resume;
mod schedule;
mod stored;

pub(crate) use current::{Flow, Receiver};
pub(crate) use stored::Start;
