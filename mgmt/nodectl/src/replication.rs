//! `nodectl replication ...`: a bucket's new versions shipped to another
//! cluster (any S3 endpoint), through the admin API.

use crate::cluster::Target;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::{ReplicationRuleSpec, ReplicationSpec, ReplicationView};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum ReplicationCmd {
    /// Replicate a bucket (versioning enabled): every new version and delete
    /// marker under PREFIX is shipped, in order per key, to BUCKET at ENDPOINT.
    /// Replaces the bucket's rules; versions made before are not shipped.
    Set {
        /// The tenant (its name or id, or `root` for the root key's buckets).
        tenant: String,
        bucket: String,
        /// The destination's S3 endpoint, `http://host:port`.
        #[arg(long)]
        endpoint: String,
        /// The destination bucket (versioning enabled there too, for the
        /// versions and delete markers to arrive as versions).
        #[arg(long)]
        to_bucket: String,
        #[arg(long)]
        access_key: String,
        /// A file holding the destination's secret key (`-`: standard input).
        #[arg(long)]
        secret_key_file: PathBuf,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long, default_value = "us-east-1")]
        region: String,
        #[arg(long, default_value = "rule-1")]
        id: String,
        /// Delete markers stay here.
        #[arg(long)]
        no_delete_markers: bool,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Where a bucket's replication stands: backlog, lag, throughput, errors.
    Status {
        tenant: String,
        bucket: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Stop replicating a bucket (what was not shipped yet is not).
    Remove {
        tenant: String,
        bucket: String,
        #[command(flatten)]
        target: Target,
    },
}

/// What `replication status` prints.
fn lines(v: &ReplicationView) -> Vec<String> {
    let mut out = Vec::new();
    for r in &v.rules {
        let prefix = if r.prefix.is_empty() { "*" } else { &r.prefix };
        out.push(format!(
            "rule {}: {prefix} → {}/{} as {}{}",
            r.id,
            r.endpoint,
            r.bucket,
            r.access_key,
            if r.delete_markers {
                ""
            } else {
                " (no delete markers)"
            }
        ));
    }
    out.push(format!(
        "backlog: {} versions, {} bytes; lag {:.1} s",
        v.backlog,
        v.backlog_bytes,
        v.lag_ms as f64 / 1000.0
    ));
    out.push(format!(
        "shipped: {} versions, {} bytes; last batch {:.1} MB/s{}",
        v.shipped_versions,
        v.shipped_bytes,
        v.rate_bps as f64 / 1e6,
        if v.last_shipped_ms > 0 {
            format!(" at {}", crate::scrub::when(v.last_shipped_ms))
        } else {
            String::new()
        }
    ));
    if v.failing > 0 {
        out.push(format!(
            "failing: {} versions (retried): {}",
            v.failing,
            v.last_error.as_deref().unwrap_or("")
        ));
    }
    out
}

pub async fn replication(cmd: ReplicationCmd) -> Result<(), NodectlError> {
    match cmd {
        ReplicationCmd::Set {
            tenant,
            bucket,
            endpoint,
            to_bucket,
            access_key,
            secret_key_file,
            prefix,
            region,
            id,
            no_delete_markers,
            target,
            json,
        } => {
            let spec = ReplicationSpec {
                rules: vec![ReplicationRuleSpec {
                    id,
                    prefix,
                    endpoint,
                    bucket: to_bucket,
                    region,
                    access_key,
                    secret_key: crate::read_secret(&secret_key_file, "secret key")?
                        .trim()
                        .to_string(),
                    delete_markers: !no_delete_markers,
                }],
            };
            let v = target
                .api()?
                .set_replication(&tenant, &bucket, &spec)
                .await?;
            if json {
                print_json(&v);
            } else {
                println!("bucket {bucket} replicates:");
                for l in lines(&v) {
                    println!("  {l}");
                }
            }
        }
        ReplicationCmd::Status {
            tenant,
            bucket,
            target,
            json,
        } => {
            let v = target.api()?.replication(&tenant, &bucket).await?;
            if json {
                print_json(&v);
            } else if v.rules.is_empty() {
                println!("bucket {bucket} does not replicate (nodectl replication set)");
            } else {
                for l in lines(&v) {
                    println!("{l}");
                }
            }
        }
        ReplicationCmd::Remove {
            tenant,
            bucket,
            target,
        } => {
            target.api()?.remove_replication(&tenant, &bucket).await?;
            println!("bucket {bucket} no longer replicates");
        }
    }
    Ok(())
}
