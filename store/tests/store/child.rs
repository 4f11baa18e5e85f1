//! A child process running one of this binary's ignored tests, for the tests that kill a writer
//! at a random moment (crashes, power cuts, the linearizability check): the child prints what it
//! did line by line, and a reader thread folds the lines into a record the parent gets back once
//! the child is dead.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Child<T> {
    process: std::process::Child,
    reader: JoinHandle<T>,
    ready: mpsc::Receiver<()>,
}

/// Starts the ignored test `test` (`module::name`) of this binary with `env`. `take` folds each
/// line the child prints into the record and says whether the child is now ready to be killed
/// (the first time it does, [`Child::wait_ready`] returns).
pub fn spawn<T: Default + Send + 'static>(
    test: &str,
    env: &[(&str, &OsStr)],
    mut take: impl FnMut(&mut T, &str) -> bool + Send + 'static,
) -> Child<T> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut process = command.spawn().unwrap();
    let stdout = process.stdout.take().unwrap();
    let (ready_tx, ready) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut record = T::default();
        let mut told = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if take(&mut record, &line) && !told {
                told = true;
                let _ = ready_tx.send(());
            }
        }
        record
    });
    Child {
        process,
        reader,
        ready,
    }
}

impl<T> Child<T> {
    /// Whether the child became ready within `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        self.ready.recv_timeout(timeout).is_ok()
    }

    /// SIGKILLs the child and returns its record.
    pub fn kill(mut self) -> T {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
        self.reader.join().unwrap()
    }
}

/// In the child: the data dir and round number the parent passed in `path_env` and `round_env`
/// (a child test run on its own, not by `parent`, stops here).
pub fn args(path_env: &str, round_env: &str, parent: &str) -> (std::ffi::OsString, u32) {
    let Some(path) = std::env::var_os(path_env) else {
        panic!("run by {parent} only");
    };
    let round = std::env::var(round_env).unwrap().parse().unwrap();
    (path, round)
}

/// In the child: the runtime its writers run on (two workers, like the machines CI runs on).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
