//! A file system that can lose power: an in-memory FUSE file system (mounted for a test, needs
//! root and `/dev/fuse`) that remembers what was made durable and can forget everything else.
//!
//! Test-only. It exists so that the store's power-cut test (`store/tests/store/powercut.rs`) and
//! the API server's (`tests/tests/e2e/powercut.rs`) check durability against the same rules: an
//! ordinary disk in a test keeps everything the kernel cached, so a missing `fsync` never shows;
//! this one forgets it.
//!
//! It keeps what a disk keeps across a power cut under POSIX's rules, and no more:
//! - a file's contents (and length) as of its last `fsync`/`fdatasync`: every write since is
//!   recorded in an undo log, and a cut plays the log backwards;
//! - a directory's entries as of its last `fsync` of the directory: a file created, renamed or
//!   removed since is back as it was (a new file whose directory was never synced is gone, even
//!   if the file itself was).
//!
//! [`PowerCut::freeze`] fails every request (so nothing reaches it while the writer is being
//! killed), then [`PowerCut::restore_power`] forgets what was never made durable and serves
//! again. Files are opened with direct I/O and attributes are never cached, so the kernel holds no
//! copy that outlives a cut.
//!
//! # Layout
//! - `State`: the nodes, each file with its undo log and each directory with its durable entries,
//!   and the counters of [`Stats`].
//! - `Volatile`: the FUSE side, every request served under the state's lock.
//! - [`PowerCut`]: the mount, and the switches a test pulls.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use libc::{EEXIST, EIO, EISDIR, ENOENT, ENOTDIR, ENOTEMPTY};

const TTL: Duration = Duration::ZERO;
const ROOT: u64 = fuser::FUSE_ROOT_ID;

#[derive(Debug)]
enum Node {
    File {
        data: Vec<u8>,
        /// The length at the last sync.
        durable_len: usize,
        /// (offset, bytes there before a change since the last sync), oldest first.
        undo: Vec<(usize, Vec<u8>)>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

impl Node {
    fn file() -> Node {
        Node::File {
            data: Vec::new(),
            durable_len: 0,
            undo: Vec::new(),
        }
    }

    fn dir() -> Node {
        Node::Dir {
            entries: BTreeMap::new(),
            durable: BTreeMap::new(),
        }
    }
}

/// What a test reports of the file system's life: how much durability it was asked for and
/// how much the cuts threw away.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// `fsync`/`fdatasync` calls on files served.
    pub file_syncs: u64,
    /// `fsync` calls on directories served.
    pub dir_syncs: u64,
    /// Bytes written, in all.
    pub written: u64,
    /// Bytes the cuts threw away (written or overwritten since the last sync), in all.
    pub lost: u64,
}

/// What the file system holds.
#[derive(Debug, Default)]
struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    frozen: bool,
    stats: Stats,
}

impl State {
    fn new() -> State {
        let mut nodes = HashMap::new();
        // The root itself survives: it stands for the mount point of a real disk.
        nodes.insert(ROOT, Node::dir());
        State {
            nodes,
            next_ino: ROOT + 1,
            ..State::default()
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = match self.nodes.get(&ino)? {
            Node::File { data, .. } => (FileType::RegularFile, data.len() as u64, 0o644, 1),
            Node::Dir { .. } => (FileType::Directory, 0, 0o755, 2),
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn entries(&mut self, dir: u64) -> Result<&mut BTreeMap<OsString, u64>, i32> {
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir { entries, .. }) => Ok(entries),
            Some(_) => Err(ENOTDIR),
            None => Err(ENOENT),
        }
    }

    fn lookup(&mut self, dir: u64, name: &OsStr) -> Result<u64, i32> {
        self.entries(dir)?.get(name).copied().ok_or(ENOENT)
    }

    fn add(&mut self, dir: u64, name: &OsStr, node: Node) -> Result<FileAttr, i32> {
        if self.entries(dir)?.contains_key(name) {
            return Err(EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        self.entries(dir)?.insert(name.to_owned(), ino);
        Ok(self.attr(ino).expect("just added"))
    }

    fn write(&mut self, ino: u64, offset: usize, bytes: &[u8]) -> Result<(), i32> {
        let Some(Node::File { data, undo, .. }) = self.nodes.get_mut(&ino) else {
            return Err(EISDIR);
        };
        let end = offset + bytes.len();
        if offset < data.len() {
            undo.push((offset, data[offset..end.min(data.len())].to_vec()));
        }
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset..end].copy_from_slice(bytes);
        self.stats.written += bytes.len() as u64;
        Ok(())
    }

    fn truncate(&mut self, ino: u64, len: usize) -> Result<(), i32> {
        let Some(Node::File { data, undo, .. }) = self.nodes.get_mut(&ino) else {
            return Err(EISDIR);
        };
        if len < data.len() {
            undo.push((len, data[len..].to_vec()));
        }
        data.resize(len, 0);
        Ok(())
    }

    fn sync(&mut self, ino: u64) -> Result<(), i32> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File {
                data,
                durable_len,
                undo,
            }) => {
                *durable_len = data.len();
                undo.clear();
                self.stats.file_syncs += 1;
            }
            Some(Node::Dir { entries, durable }) => {
                *durable = entries.clone();
                self.stats.dir_syncs += 1;
            }
            None => return Err(ENOENT),
        }
        Ok(())
    }

    /// Forgets everything not made durable.
    fn cut(&mut self) {
        let mut lost = 0;
        for node in self.nodes.values_mut() {
            match node {
                Node::File {
                    data,
                    durable_len,
                    undo,
                } => {
                    lost += undo.iter().map(|(_, b)| b.len()).sum::<usize>()
                        + data.len().saturating_sub(*durable_len);
                    for (offset, bytes) in undo.drain(..).rev() {
                        let end = offset + bytes.len();
                        if data.len() < end {
                            data.resize(end, 0);
                        }
                        data[offset..end].copy_from_slice(&bytes);
                    }
                    data.truncate(*durable_len);
                    data.resize(*durable_len, 0);
                }
                Node::Dir { entries, durable } => *entries = durable.clone(),
            }
        }
        self.stats.lost += lost as u64;
    }
}

/// The FUSE side: every request locks the state.
struct Volatile(Arc<Mutex<State>>);

macro_rules! state {
    ($self:ident, $reply:ident) => {{
        let st = $self.0.lock().unwrap();
        if st.frozen {
            $reply.error(EIO);
            return;
        }
        st
    }};
}

impl Filesystem for Volatile {
    fn lookup(&mut self, _: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut st = state!(self, reply);
        match st.lookup(parent, name) {
            Ok(ino) => reply.entry(&TTL, &st.attr(ino).expect("linked"), 0),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _: &Request<'_>, ino: u64, _: Option<u64>, reply: ReplyAttr) {
        let st = state!(self, reply);
        match st.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _: &Request<'_>,
        ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut st = state!(self, reply);
        if let Some(size) = size
            && let Err(e) = st.truncate(ino, size as usize)
        {
            reply.error(e);
            return;
        }
        match st.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(ENOENT),
        }
    }

    fn mkdir(
        &mut self,
        _: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = state!(self, reply);
        match st.add(parent, name, Node::dir()) {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut st = state!(self, reply);
        match st.entries(parent).map(|e| e.remove(name)) {
            Ok(Some(_)) => reply.ok(),
            Ok(None) => reply.error(ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&mut self, _: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut st = state!(self, reply);
        let ino = match st.lookup(parent, name) {
            Ok(ino) => ino,
            Err(e) => return reply.error(e),
        };
        match st.entries(ino) {
            Ok(entries) if !entries.is_empty() => return reply.error(ENOTEMPTY),
            Ok(_) => {}
            Err(e) => return reply.error(e),
        }
        st.entries(parent).expect("a dir").remove(name);
        reply.ok();
    }

    fn rename(
        &mut self,
        _: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut st = state!(self, reply);
        let ino = match st.lookup(parent, name) {
            Ok(ino) => ino,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = st.entries(newparent) {
            return reply.error(e);
        }
        st.entries(parent).expect("a dir").remove(name);
        st.entries(newparent)
            .expect("a dir")
            .insert(newname.to_owned(), ino);
        reply.ok();
    }

    fn open(&mut self, _: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let st = state!(self, reply);
        match st.nodes.get(&ino) {
            Some(_) => reply.opened(0, fuser::consts::FOPEN_DIRECT_IO),
            None => reply.error(ENOENT),
        }
    }

    fn read(
        &mut self,
        _: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyData,
    ) {
        let st = state!(self, reply);
        match st.nodes.get(&ino) {
            Some(Node::File { data, .. }) => {
                let start = (offset as usize).min(data.len());
                let end = (start + size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            Some(_) => reply.error(EISDIR),
            None => reply.error(ENOENT),
        }
    }

    fn write(
        &mut self,
        _: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut st = state!(self, reply);
        match st.write(ino, offset as usize, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        let _st = state!(self, reply);
        reply.ok();
    }

    fn fsync(&mut self, _: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let mut st = state!(self, reply);
        match st.sync(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = state!(self, reply);
        let entries: Vec<(OsString, u64)> = match st.entries(ino) {
            Ok(e) => e.iter().map(|(n, i)| (n.clone(), *i)).collect(),
            Err(e) => return reply.error(e),
        };
        let mut all = vec![
            (OsString::from("."), ino, FileType::Directory),
            (OsString::from(".."), ROOT, FileType::Directory),
        ];
        for (name, child) in entries {
            let kind = match st.nodes.get(&child) {
                Some(Node::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            all.push((name, child, kind));
        }
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(child, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&mut self, _: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        let mut st = state!(self, reply);
        match st.sync(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&mut self, _: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let _st = state!(self, reply);
        reply.statfs(1 << 22, 1 << 21, 1 << 21, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn create(
        &mut self,
        _: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = state!(self, reply);
        match st.add(parent, name, Node::file()) {
            Ok(attr) => reply.created(&TTL, &attr, 0, 0, fuser::consts::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn access(&mut self, _: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        let _st = state!(self, reply);
        reply.ok();
    }
}

/// The mounted file system; unmounted on drop.
pub struct PowerCut {
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    dir: tempfile::TempDir,
}

impl PowerCut {
    /// Mounts an empty file system on a new temp dir, or `None` where FUSE cannot be mounted.
    pub fn mount() -> Option<PowerCut> {
        let dir = tempfile::tempdir().ok()?;
        let state = Arc::new(Mutex::new(State::new()));
        let session = fuser::spawn_mount2(
            Volatile(state.clone()),
            dir.path(),
            &[
                MountOption::FSName("skiff-powercut".into()),
                MountOption::DefaultPermissions,
            ],
        )
        .map_err(|e| eprintln!("cannot mount the power-cut file system: {e}"))
        .ok()?;
        let fs = PowerCut {
            state,
            session: Some(session),
            dir,
        };
        // The mount is usable once the kernel answers for it.
        std::fs::metadata(fs.path()).ok()?;
        Some(fs)
    }

    /// The mount point (an empty directory at first).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fails every request from now on (the power is going).
    pub fn freeze(&self) {
        self.state.lock().unwrap().frozen = true;
    }

    /// Forgets what was never made durable and serves again (the power is back).
    pub fn restore_power(&self) {
        let mut st = self.state.lock().unwrap();
        st.cut();
        st.frozen = false;
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.state.lock().unwrap().stats
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        let path: PathBuf = self.dir.path().to_path_buf();
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&path)
            .status();
        drop(self.session.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_synced_contents_and_entries_only() {
        let mut st = State::new();
        let dir = st.add(ROOT, OsStr::new("d"), Node::dir()).unwrap().ino;
        let f = st.add(dir, OsStr::new("f"), Node::file()).unwrap().ino;
        st.write(f, 0, b"hello world").unwrap();
        st.sync(f).unwrap();
        st.sync(dir).unwrap();
        st.write(f, 6, b"WORLD and more").unwrap();
        st.truncate(f, 3).unwrap();
        st.write(f, 8, b"x").unwrap();
        let g = st.add(dir, OsStr::new("g"), Node::file()).unwrap().ino;
        st.write(g, 0, b"new").unwrap();
        st.sync(g).unwrap();
        st.cut();
        let Some(Node::File { data, .. }) = st.nodes.get(&f) else {
            panic!()
        };
        assert_eq!(data, b"hello world");
        // g's data was synced but its directory entry never was.
        assert_eq!(st.lookup(dir, OsStr::new("g")), Err(ENOENT));
        assert_eq!(st.lookup(dir, OsStr::new("f")), Ok(f));
        // d itself was never synced into the root: gone too.
        assert_eq!(st.lookup(ROOT, OsStr::new("d")), Err(ENOENT));
        assert!(st.stats.lost > 0);
    }
}
