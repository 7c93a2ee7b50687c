//! Stopping a receive cleanly on a signal: the [`StopFlag`] the caller's
//! signal handlers set, and [`interruptible`], a reader that gives up
//! waiting for input once it is set.

use std::io::Read;

/// The signal that asked a receive to stop (0: none), set by the caller's
/// signal handlers (see [`Options::stop`](crate::Options::stop)).
pub type StopFlag = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// The name of signal `n`, for messages.
pub(crate) fn signal_name(n: usize) -> &'static str {
    match i32::try_from(n).unwrap_or(0) {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        _ => "a signal",
    }
}

/// Reads `inner` on a thread of its own, so that a read waiting for input
/// (a pipe, a socket) gives up when `stop` is set: the receive can stop
/// cleanly even while the sender is silent.
pub fn interruptible<R: Read + Send + 'static>(mut inner: R, stop: StopFlag) -> impl Read {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    const CHUNK: usize = 1 << 20;
    let (tx, rx) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(4);
    let (back_tx, back_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || loop {
        let mut buf = back_rx.try_recv().unwrap_or_default();
        buf.resize(CHUNK, 0);
        let r = loop {
            match inner.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let last = !matches!(r, Ok(n) if n > 0);
        let msg = r.map(|n| {
            buf.truncate(n);
            buf
        });
        if tx.send(msg).is_err() || last {
            return;
        }
    });
    struct Feed {
        rx: mpsc::Receiver<std::io::Result<Vec<u8>>>,
        back: mpsc::Sender<Vec<u8>>,
        cur: Vec<u8>,
        at: usize,
        stop: StopFlag,
        done: bool,
    }
    impl Read for Feed {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            while self.at == self.cur.len() {
                if self.done {
                    return Ok(0);
                }
                let n = self.stop.load(Ordering::Relaxed);
                if n != 0 {
                    return Err(std::io::Error::other(format!(
                        "stopped by {}",
                        signal_name(n)
                    )));
                }
                match self.rx.recv_timeout(std::time::Duration::from_millis(200)) {
                    Ok(Ok(buf)) => {
                        if buf.is_empty() {
                            self.done = true;
                        }
                        let old = std::mem::replace(&mut self.cur, buf);
                        let _ = self.back.send(old);
                        self.at = 0;
                    }
                    Ok(Err(e)) => {
                        self.done = true;
                        return Err(e);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        self.done = true;
                    }
                }
            }
            let n = out.len().min(self.cur.len() - self.at);
            out[..n].copy_from_slice(&self.cur[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }
    Feed {
        rx,
        back: back_tx,
        cur: Vec::new(),
        at: 0,
        stop,
        done: false,
    }
}
