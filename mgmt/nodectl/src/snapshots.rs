//! `nodectl snapshot ...`: named, read-only views of a bucket as it was when
//! each was made, through the admin API. Clients read them through S3 under
//! `.snapshot/NAME/` in the bucket.

use crate::cluster::Target;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::SnapshotsView;

#[derive(clap::Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Snapshot a bucket as it is now (in one step, whatever it holds). What
    /// later writes and deletes replace is kept while a snapshot sees it.
    Create {
        /// The tenant (its name or id, or `root` for the root key's buckets).
        tenant: String,
        bucket: String,
        /// 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot or a dash.
        name: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// A bucket's snapshots, oldest first, and what is kept for them.
    List {
        tenant: String,
        bucket: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Delete a snapshot: what only it kept is freed by the collector.
    Delete {
        tenant: String,
        bucket: String,
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

/// The table `snapshot list` prints.
fn table(v: &SnapshotsView) -> Vec<String> {
    let nw = v
        .snapshots
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = vec![format!("{:<nw$}  {:<14}  S3 PREFIX", "NAME", "CREATED")];
    for s in &v.snapshots {
        let created = crate::scrub::when(s.created_ms);
        out.push(format!("{:<nw$}  {created:<14}  {}", s.name, s.prefix));
    }
    out.push(format!(
        "kept for snapshots: {} versions, {} bytes (not in the bucket's usage)",
        v.kept_versions, v.kept_bytes
    ));
    out
}

pub async fn snapshot(cmd: SnapshotCmd) -> Result<(), NodectlError> {
    match cmd {
        SnapshotCmd::Create {
            tenant,
            bucket,
            name,
            target,
            json,
        } => {
            let s = target
                .api()?
                .create_snapshot(&tenant, &bucket, &name)
                .await?;
            if json {
                print_json(&s);
            } else {
                println!(
                    "snapshot {} of {bucket}: read it under s3://{bucket}/{}",
                    s.name, s.prefix
                );
            }
        }
        SnapshotCmd::List {
            tenant,
            bucket,
            target,
            json,
        } => {
            let v = target.api()?.snapshots(&tenant, &bucket).await?;
            if json {
                print_json(&v);
            } else if v.snapshots.is_empty() {
                println!(
                    "bucket {bucket} has no snapshots (nodectl snapshot create TENANT BUCKET NAME)"
                );
            } else {
                for l in table(&v) {
                    println!("{l}");
                }
            }
        }
        SnapshotCmd::Delete {
            tenant,
            bucket,
            name,
            target,
        } => {
            target
                .api()?
                .delete_snapshot(&tenant, &bucket, &name)
                .await?;
            println!("snapshot {name} of {bucket} deleted");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_adminapi::SnapshotView;

    fn now_ms() -> i64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(0, |d| d.as_millis() as i64)
    }

    #[test]
    fn the_list_is_a_table_oldest_first_with_what_is_kept() {
        let v = SnapshotsView {
            bucket: "b".into(),
            snapshots: vec![SnapshotView {
                name: "daily-1".into(),
                created_ms: now_ms() - 7_200_000,
                seq: 7,
                prefix: ".snapshot/daily-1/".into(),
            }],
            kept_versions: 2,
            kept_bytes: 20,
        };
        assert_eq!(
            table(&v),
            [
                "NAME     CREATED         S3 PREFIX",
                "daily-1  2.0 h ago       .snapshot/daily-1/",
                "kept for snapshots: 2 versions, 20 bytes (not in the bucket's usage)",
            ]
        );
    }
}
