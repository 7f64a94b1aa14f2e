//! File attributes: kept as an object's user metadata (`nfs-mode`, `nfs-uid`,
//! `nfs-gid`, `nfs-mtime`, which S3 shows as `x-amz-meta-nfs-*`), else the
//! export's defaults.

use crate::exports::Export;
use crate::handle::file_id;
use cairn_meta::ObjectRecord;
use nfs3_server::nfs3_types::nfs3::{
    fattr3, ftype3, nfstime3, sattr3, set_mtime, specdata3, Nfs3Option,
};
use std::collections::BTreeMap;

pub const MODE: &str = "nfs-mode";
pub const UID: &str = "nfs-uid";
pub const GID: &str = "nfs-gid";
pub const MTIME: &str = "nfs-mtime";
/// An exclusive create's verifier (hex), so a retried create finds its file.
pub const CREATE_VERF: &str = "nfs-createverf";

pub fn time(ms: i64) -> nfstime3 {
    let ms = ms.max(0);
    nfstime3 {
        seconds: u32::try_from(ms / 1000).unwrap_or(u32::MAX),
        nseconds: ((ms % 1000) * 1_000_000) as u32,
    }
}

fn ms_of(t: nfstime3) -> i64 {
    i64::from(t.seconds) * 1000 + i64::from(t.nseconds / 1_000_000)
}

fn num(meta: &BTreeMap<String, String>, name: &str) -> Option<u32> {
    meta.get(name).and_then(|v| v.parse().ok())
}

/// A file's attributes: `rec`'s, with `size` and `modified_ms` where a draft
/// is ahead of it.
pub fn file(
    ex: &Export,
    key: &str,
    rec: Option<&ObjectRecord>,
    size: u64,
    modified_ms: i64,
) -> fattr3 {
    let meta = rec.map(|r| &r.user_meta);
    let get = |name| meta.and_then(|m| num(m, name));
    let mtime = meta
        .and_then(|m| m.get(MTIME))
        .and_then(|v| v.parse().ok())
        .unwrap_or(modified_ms);
    fattr3 {
        type_: ftype3::NF3REG,
        mode: get(MODE).unwrap_or(0o644) & 0o7777,
        nlink: 1,
        uid: get(UID).unwrap_or(ex.conf.uid),
        gid: get(GID).unwrap_or(ex.conf.gid),
        size,
        used: size,
        rdev: specdata3::default(),
        fsid: ex.id,
        fileid: file_id(ex.id, key),
        atime: time(mtime),
        mtime: time(mtime),
        ctime: time(modified_ms),
    }
}

/// A directory's attributes: its marker object's (made by `mkdir`), if it has
/// one; its time is the latest of the marker's and `changed_ms`.
pub fn dir(ex: &Export, path: &str, marker: Option<&ObjectRecord>, changed_ms: i64) -> fattr3 {
    let meta = marker.map(|r| &r.user_meta);
    let get = |name| meta.and_then(|m| num(m, name));
    let t = marker
        .map_or(ex.created_ms, |m| m.modified_ms)
        .max(changed_ms);
    fattr3 {
        type_: ftype3::NF3DIR,
        mode: get(MODE).unwrap_or(0o755) & 0o7777,
        nlink: 2,
        uid: get(UID).unwrap_or(ex.conf.uid),
        gid: get(GID).unwrap_or(ex.conf.gid),
        size: 4096,
        used: 4096,
        rdev: specdata3::default(),
        fsid: ex.id,
        fileid: file_id(ex.id, path),
        atime: time(t),
        mtime: time(t),
        ctime: time(t),
    }
}

/// The attributes above every export (what `/` shows).
pub fn top() -> fattr3 {
    fattr3 {
        type_: ftype3::NF3DIR,
        mode: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 4096,
        used: 4096,
        rdev: specdata3::default(),
        fsid: 0,
        fileid: 1,
        atime: time(0),
        mtime: time(0),
        ctime: time(0),
    }
}

/// `meta` with what `set` changes (mode, owner, modification time); whether
/// anything changed.
pub fn apply(meta: &mut BTreeMap<String, String>, set: &sattr3) -> bool {
    let mut changed = false;
    let mut put = |name: &str, v: String| {
        if meta.get(name) != Some(&v) {
            meta.insert(name.to_string(), v);
            changed = true;
        }
    };
    if let Nfs3Option::Some(m) = set.mode {
        put(MODE, (m & 0o7777).to_string());
    }
    if let Nfs3Option::Some(u) = set.uid {
        put(UID, u.to_string());
    }
    if let Nfs3Option::Some(g) = set.gid {
        put(GID, g.to_string());
    }
    match set.mtime {
        set_mtime::DONT_CHANGE => {}
        set_mtime::SET_TO_SERVER_TIME => put(MTIME, cairn_meta::now_ms().to_string()),
        set_mtime::SET_TO_CLIENT_TIME(t) => put(MTIME, ms_of(t).to_string()),
    }
    changed
}
