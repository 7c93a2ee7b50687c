//! A ptrace stepper: runs a command and kills it (SIGKILL, the whole
//! process) before its N-th system call, counted across all its threads,
//! so that a test can stop a program at every instant where what it has
//! done to the system can change, not only where the program offers a hook.
//!
//! The command runs in a process group of its own, traced from its `exec`
//! (`PTRACE_TRACEME`); its threads and children are traced too
//! (`PTRACE_O_TRACECLONE`, `TRACEFORK`, `TRACEVFORK`) and killed if the
//! stepper goes away (`PTRACE_O_EXITKILL`). Each syscall-entry stop of any
//! of them counts (or of the first thread only, see [`At`]); at the N-th
//! the process gets SIGKILL while that thread is stopped, so the call is
//! never made (the kernel skips a system call whose tracee has a fatal
//! signal pending at entry). The other threads are where they were:
//! between two system calls, or inside one. Which thread makes the N-th
//! call of all can change from run to run (threads start and wait as they
//! are scheduled); the N-th of the first thread is the same on every run
//! where that thread's calls do not depend on the others'.
//!
//! Only the group's own processes are waited for (`waitpid(-pgid)`), so the
//! children that other threads of a test binary run are left to them.

use std::collections::hash_map::{Entry, HashMap};
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Where to kill: before the `n`-th system call (counted from 1) of all
/// the process's threads, or of its first thread only (`main`: the same
/// instant on every run wherever that thread runs alone, whatever the
/// others do meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub n: u64,
    pub main: bool,
}

/// One system call entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Its number (`-1` where it cannot be read: see [`syscall_name`]).
    pub nr: i64,
    /// Whether the process's first thread made it.
    pub main: bool,
}

/// How a run under the stepper ended.
#[derive(Debug)]
pub struct Stepped {
    /// Its exit status (a signal when killed).
    pub status: ExitStatus,
    /// Whether the stepper killed it (it had reached the chosen call).
    pub killed: bool,
    /// The system call it was killed before: its number, and its name
    /// where [`syscall_name`] knows it.
    pub before: Option<(i64, &'static str)>,
    /// The system calls its threads entered, in the order they did (the
    /// one it was killed before included).
    pub calls: Vec<Call>,
    /// What it wrote to standard output and standard error.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `cmd` (its standard output and error are taken) and, when `at` is
/// given, kills it before that system call; with `None`, or when it makes
/// fewer, it runs to its end and [`Stepped::calls`] says which it made.
pub fn run_killed_at(cmd: &mut Command, at: Option<At>) -> io::Result<Stepped> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: between fork and exec only setpgid(2) and ptrace(2), both async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            ptrace::traceme()?;
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = Pid::from_raw(child.id() as i32);
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(child.stdout.take().map(|r| Box::new(r) as _));
    let err = reader(child.stderr.take().map(|r| Box::new(r) as _));
    // Whatever goes wrong here, the traced process must not stay stopped.
    let give_up = |e: io::Error| {
        let _ = kill(pid, Signal::SIGKILL);
        let group = Pid::from_raw(-pid.as_raw());
        while waitpid(group, Some(WaitPidFlag::__WALL)).is_ok() {}
        e
    };
    // The child's stop at its exec; its process group exists by then.
    match waitpid(pid, Some(WaitPidFlag::__WALL)) {
        Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
        other => {
            return Err(give_up(io::Error::other(format!(
                "the traced child did not stop at its exec: {other:?}"
            ))));
        }
    }
    ptrace::setoptions(
        pid,
        ptrace::Options::PTRACE_O_TRACESYSGOOD
            | ptrace::Options::PTRACE_O_TRACECLONE
            | ptrace::Options::PTRACE_O_TRACEFORK
            | ptrace::Options::PTRACE_O_TRACEVFORK
            | ptrace::Options::PTRACE_O_EXITKILL,
    )
    .and_then(|()| ptrace::syscall(pid, None))
    .map_err(|e| give_up(e.into()))?;
    // Each traced task: whether it is inside a system call (between its
    // entry and exit stops).
    let mut inside: HashMap<Pid, bool> = HashMap::from([(pid, false)]);
    let mut counted = 0u64;
    let mut calls = Vec::new();
    let mut killed = false;
    let mut before = None;
    let group = Pid::from_raw(-pid.as_raw());
    let status = loop {
        let ws = match waitpid(group, Some(WaitPidFlag::__WALL)) {
            Ok(ws) => ws,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(give_up(e.into())),
        };
        // Once killed, every task dies where it is: none is let go on.
        let go = |killed: bool, tid: Pid, sig: Option<Signal>| {
            if !killed {
                let _ = ptrace::syscall(tid, sig);
            }
        };
        match ws {
            WaitStatus::Exited(tid, code) => {
                inside.remove(&tid);
                if tid == pid {
                    break ExitStatus::from_raw((code & 0xff) << 8);
                }
            }
            WaitStatus::Signaled(tid, sig, _) => {
                inside.remove(&tid);
                if tid == pid {
                    break ExitStatus::from_raw(sig as i32);
                }
            }
            WaitStatus::PtraceSyscall(tid) => {
                let now = inside.entry(tid).or_insert(false);
                *now = !*now;
                if *now {
                    let call = syscall_of(tid);
                    let main = tid == pid;
                    calls.push(Call { nr: call.0, main });
                    if let Some(at) = at.filter(|at| main || !at.main) {
                        counted += 1;
                        if counted == at.n && !killed {
                            before = Some(call);
                            kill(pid, Signal::SIGKILL).map_err(|e| give_up(e.into()))?;
                            killed = true;
                        }
                    }
                }
                go(killed, tid, None);
            }
            WaitStatus::PtraceEvent(tid, _, _) => go(killed, tid, None),
            WaitStatus::Stopped(tid, sig) => match inside.entry(tid) {
                // A signal for it: delivered.
                Entry::Occupied(_) => go(killed, tid, Some(sig)),
                // A new thread or child, at its first stop (SIGSTOP).
                Entry::Vacant(v) => {
                    v.insert(false);
                    go(killed, tid, None);
                }
            },
            _ => {}
        }
    };
    // Reaped here: the Child must not be waited for again.
    drop(child);
    Ok(Stepped {
        status,
        killed,
        before,
        calls,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The system call task `tid`, stopped at its entry, is about to make.
fn syscall_of(tid: Pid) -> (i64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    let nr = ptrace::getregs(tid).map_or(-1, |r| r.orig_rax as i64);
    #[cfg(not(target_arch = "x86_64"))]
    let nr = {
        let _ = tid;
        -1
    };
    (nr, syscall_name(nr))
}

/// The name of system call `nr`, for the calls a program changes files
/// with and a few more; `"?"` for the others.
#[cfg(target_arch = "x86_64")]
pub fn syscall_name(nr: i64) -> &'static str {
    use nix::libc as c;
    const NAMES: &[(c::c_long, &str)] = &[
        (c::SYS_read, "read"),
        (c::SYS_write, "write"),
        (c::SYS_pread64, "pread64"),
        (c::SYS_pwrite64, "pwrite64"),
        (c::SYS_openat, "openat"),
        (c::SYS_openat2, "openat2"),
        (c::SYS_close, "close"),
        (c::SYS_mkdirat, "mkdirat"),
        (c::SYS_mknodat, "mknodat"),
        (c::SYS_symlinkat, "symlinkat"),
        (c::SYS_linkat, "linkat"),
        (c::SYS_unlinkat, "unlinkat"),
        (c::SYS_renameat, "renameat"),
        (c::SYS_renameat2, "renameat2"),
        (c::SYS_fsetxattr, "fsetxattr"),
        (c::SYS_setxattr, "setxattr"),
        (c::SYS_lsetxattr, "lsetxattr"),
        (c::SYS_fremovexattr, "fremovexattr"),
        (c::SYS_lremovexattr, "lremovexattr"),
        (c::SYS_fchown, "fchown"),
        (c::SYS_fchownat, "fchownat"),
        (c::SYS_fchmod, "fchmod"),
        (c::SYS_fchmodat, "fchmodat"),
        (c::SYS_utimensat, "utimensat"),
        (c::SYS_ftruncate, "ftruncate"),
        (c::SYS_fallocate, "fallocate"),
        (c::SYS_fsync, "fsync"),
        (c::SYS_fdatasync, "fdatasync"),
        (c::SYS_syncfs, "syncfs"),
        (c::SYS_sync_file_range, "sync_file_range"),
        (c::SYS_copy_file_range, "copy_file_range"),
        (c::SYS_ioctl, "ioctl"),
        (c::SYS_flock, "flock"),
        (c::SYS_mmap, "mmap"),
        (c::SYS_munmap, "munmap"),
        (c::SYS_statx, "statx"),
        (c::SYS_newfstatat, "newfstatat"),
        (c::SYS_fstat, "fstat"),
        (c::SYS_fstatfs, "fstatfs"),
        (c::SYS_getdents64, "getdents64"),
        (c::SYS_futex, "futex"),
        (c::SYS_clone3, "clone3"),
        (c::SYS_clone, "clone"),
        (c::SYS_exit_group, "exit_group"),
        (c::SYS_exit, "exit"),
    ];
    NAMES
        .iter()
        .find(|&&(n, _)| n == nr)
        .map_or("?", |&(_, name)| name)
}

/// The name of system call `nr` (known on x86_64 only).
#[cfg(not(target_arch = "x86_64"))]
pub fn syscall_name(_nr: i64) -> &'static str {
    "?"
}
