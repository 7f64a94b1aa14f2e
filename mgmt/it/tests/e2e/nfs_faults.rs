//! NFS under a hostile or unlucky client (from the third outside attack): one
//! that sends READs and never reads the replies; resends of calls that change
//! nothing, and kept replies outliving a busy client's other calls; a read-ahead
//! window whose fetch failed while the datapath restarted.

use crate::nfs::{get, setup, LOCAL};
use cairn_it::nfs::{at, call_with_xid, reply_status, send_call, Mount};
use cairn_it::random_bytes;
use nfs3_client::nfs3_types::nfs3::{stable_how, GETATTR3args, READ3args, REMOVE3args, WRITE3args};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use std::time::{Duration, Instant};

const GETATTR: u32 = 1;
const READ: u32 = 6;
const REMOVE: u32 = 12;
const WRITE: u32 = 7;

/// 2000 READs of 1 MiB sent on one connection whose replies are never read:
/// mgmtd holds at most the replies of the requests it lets in flight (64), not
/// 2 GB of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_holds_bounded_memory() {
    let s = setup("noread").await;
    let mut m = Mount::new(s.nfs, "/root/noread", LOCAL).await.unwrap();
    let root = m.root.clone();
    let f = m.create(&root, "f").await.unwrap();
    m.write_all(&f, 0, &random_bytes(4 << 20, 3)).await.unwrap();
    m.commit(&f).await.unwrap();
    let before = s.node.mgmtd_rss_mib().expect("mgmtd runs");
    let mut c = tokio::net::TcpStream::connect(s.nfs).await.unwrap();
    for i in 0..2000u32 {
        let args = READ3args {
            file: f.clone(),
            offset: u64::from(i % 4) << 20,
            count: 1 << 20,
        };
        // The server stops reading once its in-flight replies are unsent.
        match tokio::time::timeout(
            Duration::from_secs(2),
            send_call(&mut c, 9000 + i, READ, &args),
        )
        .await
        {
            Ok(r) => r.unwrap(),
            Err(_) => break,
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let peak = s.node.mgmtd_rss_mib().expect("mgmtd runs");
    assert!(
        peak < before + 400,
        "mgmtd went from {before} MiB to {peak} MiB for one connection that never reads"
    );
    drop(c);
    // Still serving; and the requests the gone client left are not worked
    // through (and logged) one by one afterwards.
    assert_eq!(m.read(&f, 0, 10).await.unwrap().len(), 10);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = std::fs::read_to_string(s.node.dir.path().join("mgmtd.log")).unwrap_or_default();
    let errors = log.matches("Broken pipe").count();
    assert!(
        errors < 10,
        "{errors} lines of Broken pipe after the client left"
    );
}

/// A READ or GETATTR resent with its xid is answered again (not dropped
/// unanswered for minutes); the kept reply of a REMOVE is still the answer to
/// its resend after 3000 other calls of the same client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_of_reads_are_answered_and_kept_replies_outlive_other_calls() {
    let s = setup("resend2").await;
    let mut m = Mount::new(s.nfs, "/root/resend2", LOCAL).await.unwrap();
    let root = m.root.clone();
    let f = m.create(&root, "f").await.unwrap();
    m.write_all(&f, 0, b"hello").await.unwrap();
    m.commit(&f).await.unwrap();
    let g = m.create(&root, "g").await.unwrap();
    m.commit(&g).await.unwrap();
    let mut c = tokio::net::TcpStream::connect(s.nfs).await.unwrap();
    let read = READ3args {
        file: f.clone(),
        offset: 0,
        count: 100,
    };
    let first = call_with_xid(&mut c, 500, READ, &read).await.unwrap();
    let again = call_with_xid(&mut c, 500, READ, &read).await.unwrap();
    assert_eq!(first, again, "a resent READ is answered");

    let remove = REMOVE3args {
        object: at(&root, "g"),
    };
    let removed = call_with_xid(&mut c, 501, REMOVE, &remove).await.unwrap();
    assert_eq!(reply_status(&removed), 0);
    let getattr = GETATTR3args { object: f.clone() };
    for i in 0..3000u32 {
        call_with_xid(&mut c, 1000 + i, GETATTR, &getattr)
            .await
            .unwrap();
    }
    let resent = call_with_xid(&mut c, 501, REMOVE, &remove).await.unwrap();
    assert_eq!(resent, removed, "the REMOVE's reply outlived 3000 GETATTRs");
    assert_eq!(get(&s.node, "resend2", "f").await, b"hello");
}

/// A file read in sequence while datapathd is killed: READs may fail while it
/// is down, and once it is back the same READs succeed (a read-ahead window
/// whose fetch failed is not kept), with the right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_ahead_window_does_not_outlive_the_outage() {
    let mut s = setup("outage").await;
    let data = random_bytes(40 << 20, 9);
    let mut m = Mount::new(s.nfs, "/root/outage", LOCAL).await.unwrap();
    let root = m.root.clone();
    let f = m.create(&root, "f").await.unwrap();
    m.write_all(&f, 0, &data).await.unwrap();
    m.commit(&f).await.unwrap();
    // In sequence: windows ahead are being fetched.
    for i in 0..3u64 {
        let got = m.read(&f, i << 20, 1 << 20).await.unwrap();
        assert_eq!(got, &data[(i << 20) as usize..((i + 1) << 20) as usize]);
    }
    s.node.kill_datapathd();
    // Read on in sequence: the windows already fetched answer, the next ones
    // are fetched while datapathd is down and fail.
    let mut failed = 0;
    for i in 3..16u64 {
        if m.read(&f, i << 20, 1 << 20).await.is_err() {
            failed += 1;
        }
    }
    println!("READs failed with datapathd down: {failed} of 13");
    assert!(
        failed > 0,
        "no READ reached the store while datapathd was down"
    );
    s.node.start_datapathd();
    let t = Instant::now();
    loop {
        match m.read(&f, 15 << 20, 1 << 20).await {
            Ok(got) => {
                assert_eq!(
                    got,
                    &data[15 << 20..16 << 20],
                    "the right bytes after the outage"
                );
                break;
            }
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                println!("READ after the restart: {e:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("READs still fail 30 s after datapathd is back: {e:?}"),
        }
    }
    for i in 16..20u64 {
        let got = m.read(&f, i << 20, 1 << 20).await.unwrap();
        assert_eq!(got, &data[(i << 20) as usize..((i + 1) << 20) as usize]);
    }
}

/// 300 WRITEs of 1 MiB pipelined on one connection, its replies read as they
/// come (as the Linux client sends): all answered, nothing stalls once more
/// requests are waiting than the connection may have in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_pipelining_many_writes_hears_every_reply() {
    use tokio::io::AsyncReadExt;
    let s = setup("pipeline").await;
    let mut m = Mount::new(s.nfs, "/root/pipeline", LOCAL).await.unwrap();
    let root = m.root.clone();
    let f = m.create(&root, "f").await.unwrap();
    let (mut rd, mut wr) = tokio::net::TcpStream::connect(s.nfs)
        .await
        .unwrap()
        .into_split();
    const N: u32 = 300;
    let replies = tokio::spawn(async move {
        let mut n = 0;
        while n < N {
            let mut head = [0u8; 4];
            rd.read_exact(&mut head).await.unwrap();
            let mut reply = vec![0u8; (u32::from_be_bytes(head) & 0x7fff_ffff) as usize];
            rd.read_exact(&mut reply).await.unwrap();
            assert_eq!(reply_status(&reply), 0, "WRITE {n}");
            n += 1;
        }
        n
    });
    let chunk = random_bytes(1 << 20, 5);
    for i in 0..N {
        let args = WRITE3args {
            file: f.clone(),
            offset: u64::from(i % 8) << 20,
            count: 1 << 20,
            stable: stable_how::UNSTABLE,
            data: Opaque::borrowed(&chunk),
        };
        send_call(&mut wr, 20_000 + i, WRITE, &args).await.unwrap();
    }
    let n = tokio::time::timeout(Duration::from_secs(120), replies)
        .await
        .expect("every reply within 120 s")
        .unwrap();
    assert_eq!(n, N);
    m.commit(&f).await.unwrap();
    assert_eq!(m.getattr(&f).await.unwrap().size, 8 << 20);
}
