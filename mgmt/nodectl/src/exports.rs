//! `nodectl export ...`: which buckets are mounted over NFS (as
//! `/TENANT/BUCKET`), by which client networks and as which owner, through the
//! admin API (`/v1/exports`).

use crate::cluster::Target;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::{ExportSpec, ExportView};

#[derive(clap::Subcommand, Debug)]
pub enum ExportCmd {
    /// Every export: the path clients mount, the client networks, the owner
    /// files show, read-write or read-only.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Export a tenant's bucket over NFS as /TENANT/BUCKET (its export
    /// replaced, if it had one). Clients are let in by their address alone.
    Add {
        /// The tenant (its name or id, or `root` for the root key's buckets).
        tenant: String,
        bucket: String,
        /// A client network that may mount it: CIDR (10.0.0.0/8, fd00::/64) or
        /// one address. Repeatable; at least one.
        #[arg(long = "client", value_name = "CIDR", required = true)]
        clients: Vec<String>,
        /// The owner its files and directories show (default 65534, nobody).
        #[arg(long)]
        uid: Option<u32>,
        /// Their group (default 65534).
        #[arg(long)]
        gid: Option<u32>,
        /// Clients may read, never write.
        #[arg(long)]
        read_only: bool,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Stop exporting a bucket (its data stays; clients that mounted it lose
    /// it).
    Remove {
        tenant: String,
        bucket: String,
        #[command(flatten)]
        target: Target,
    },
}

fn mode(e: &ExportView) -> &'static str {
    if e.read_only {
        "ro"
    } else {
        "rw"
    }
}

/// The table `export list` prints: a header and one line per export.
fn table(all: &[ExportView]) -> Vec<String> {
    let clients = |e: &ExportView| e.clients.join(",");
    let pw = all.iter().map(|e| e.path.len()).max().unwrap_or(0).max(4);
    let cw = all
        .iter()
        .map(|e| clients(e).len())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut out = vec![format!(
        "{:<pw$}  {:<cw$}  {:<11}  MODE",
        "PATH", "CLIENTS", "UID:GID"
    )];
    for e in all {
        out.push(format!(
            "{:<pw$}  {:<cw$}  {:<11}  {}",
            e.path,
            clients(e),
            format!("{}:{}", e.uid, e.gid),
            mode(e)
        ));
    }
    out
}

pub async fn export(cmd: ExportCmd) -> Result<(), NodectlError> {
    match cmd {
        ExportCmd::List { target, json } => {
            let all = target.api()?.exports().await?;
            if json {
                print_json(&all);
            } else if all.is_empty() {
                println!("no NFS exports (nodectl export add TENANT BUCKET --client CIDR)");
            } else {
                for l in table(&all) {
                    println!("{l}");
                }
            }
        }
        ExportCmd::Add {
            tenant,
            bucket,
            clients,
            uid,
            gid,
            read_only,
            target,
            json,
        } => {
            let spec = ExportSpec {
                clients,
                uid,
                gid,
                read_only,
            };
            let e = target.api()?.set_export(&tenant, &bucket, &spec).await?;
            if json {
                print_json(&e);
            } else {
                println!(
                    "{} exported to {} ({}, files owned by {}:{})",
                    e.path,
                    e.clients.join(", "),
                    if e.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    },
                    e.uid,
                    e.gid
                );
            }
        }
        ExportCmd::Remove {
            tenant,
            bucket,
            target,
        } => {
            target.api()?.remove_export(&tenant, &bucket).await?;
            println!("bucket {bucket} of {tenant} is not exported");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_a_table_with_one_line_per_export() {
        let e = |path: &str, clients: &[&str], ro| ExportView {
            tenant: "acme".into(),
            bucket: "b".into(),
            path: path.into(),
            clients: clients.iter().map(|c| c.to_string()).collect(),
            uid: 1000,
            gid: 100,
            read_only: ro,
        };
        let t = table(&[
            e("/acme/data", &["10.0.0.0/8", "192.0.2.7/32"], false),
            e("/root/x", &["::1/128"], true),
        ]);
        assert_eq!(
            t,
            [
                "PATH        CLIENTS                  UID:GID      MODE",
                "/acme/data  10.0.0.0/8,192.0.2.7/32  1000:100     rw",
                "/root/x     ::1/128                  1000:100     ro",
            ]
        );
    }
}
