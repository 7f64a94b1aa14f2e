//! `nodectl cluster ...` and `nodectl node drain|remove`: cluster membership
//! through a node's admin API.

use crate::NodectlError;
use cairn_adminapi::{AdminClient, ClusterStatus, InitRequest, JoinRequest, NodeRequest};
use std::path::PathBuf;

/// Which node's admin API a command talks to: a node started by `nodectl dev up`
/// (`--data DIR`, and `--node K` in a local cluster), or any node by address with
/// its token file.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Data directory of a local cluster (`nodectl dev up --nodes N`).
    #[arg(long, default_value = "./cairn-data")]
    pub data: PathBuf,
    /// Which node of the local cluster (1-based).
    #[arg(long, default_value_t = 1)]
    pub node: u16,
    /// The admin API of a node (instead of --data/--node).
    #[arg(long)]
    pub admin: Option<String>,
    /// The node's admin token file (with --admin).
    #[arg(long, default_value = "/var/lib/cairn/mgmt/admin.token")]
    pub token_file: PathBuf,
}

impl Target {
    /// Whether it names a node by address (`--admin` or CAIRN_ADMIN), not a
    /// local cluster's.
    pub fn remote(&self) -> bool {
        self.admin.is_some() || std::env::var("CAIRN_ADMIN").is_ok_and(|v| !v.trim().is_empty())
    }

    /// The node's admin API: `--admin` (else CAIRN_ADMIN) with the token in
    /// CAIRN_ADMIN_TOKEN if set, else the one in `--token-file`; without either
    /// address, the local cluster's node under `--data`.
    pub fn api(&self) -> Result<AdminClient, NodectlError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        match self.admin.clone().or_else(|| env("CAIRN_ADMIN")) {
            Some(addr) => match env("CAIRN_ADMIN_TOKEN") {
                Some(t) => Ok(AdminClient::new(&addr, t.trim())),
                None => Ok(AdminClient::from_token_file(&addr, &self.token_file)?),
            },
            None => crate::admin::of_dev(&self.data, self.node),
        }
    }
}

pub async fn init(
    t: &Target,
    ec: Option<String>,
    replicas: Option<u8>,
    id: Option<String>,
) -> Result<(), NodectlError> {
    let r = t
        .api()?
        .cluster_init(&InitRequest {
            cluster_id: id,
            ec,
            replicas,
        })
        .await?;
    println!(
        "cluster {} created\njoin token: {}\n\nOn each other node:\n  nodectl cluster join <THIS NODE'S INTERNAL ADDRESS> --token {}",
        r.cluster_id, r.token, r.token
    );
    Ok(())
}

pub async fn join(t: &Target, seed: &str, token: &str) -> Result<(), NodectlError> {
    let r = t
        .api()?
        .cluster_join(&JoinRequest {
            seed: seed.to_string(),
            token: token.to_string(),
        })
        .await?;
    println!("joined cluster {}", r.cluster_id);
    Ok(())
}

pub async fn token(t: &Target) -> Result<(), NodectlError> {
    println!("{}", t.api()?.cluster_token().await?.token);
    Ok(())
}

/// `nodectl cluster health`: prints healthy, degraded or unavailable with the
/// reasons, and exits 0, 1 or 2.
pub async fn health(t: &Target, json: bool) -> Result<(), NodectlError> {
    let api = t.api()?.with_timeout(std::time::Duration::from_secs(10));
    let (word, code, why): (&str, i32, Vec<String>) = match api.cluster_status().await {
        Err(e) => ("unavailable", 2, vec![e.to_string()]),
        Ok(s) if s.cluster_id.is_empty() => (
            "unavailable",
            2,
            vec!["this node is not part of a cluster".into()],
        ),
        Ok(s) if s.leader.is_none() => (
            "unavailable",
            2,
            vec!["no leader: no quorum of voters".into()],
        ),
        Ok(s) => {
            let mut why: Vec<String> = s
                .nodes
                .iter()
                .filter(|n| n.state != "up")
                .map(|n| format!("node {} is {}", n.id, n.state))
                .collect();
            let o = &s.objects;
            if !s.fully_protected {
                why.push(format!(
                    "{} objects degraded, {} lost, {} fragments missing",
                    o.degraded, o.lost, o.fragments_missing
                ));
            }
            match why.is_empty() {
                true => ("healthy", 0, why),
                false => ("degraded", 1, why),
            }
        }
    };
    if json {
        println!("{}", serde_json::json!({"health": word, "reasons": why}));
    } else {
        println!("{word}");
        for w in &why {
            println!("  {w}");
        }
    }
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

pub async fn status(t: &Target, json: bool) -> Result<(), NodectlError> {
    let s: ClusterStatus = t.api()?.cluster_status().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        return Ok(());
    }
    if s.cluster_id.is_empty() {
        println!("this node is not part of a cluster (nodectl cluster init | join)");
        return Ok(());
    }
    let o = &s.objects;
    println!(
        "cluster {}  epoch {}  term {}  {}",
        s.cluster_id, s.epoch, s.term, s.protection
    );
    println!(
        "objects: {} total, {} fully protected, {} degraded, {} lost{}",
        o.total,
        o.protected,
        o.degraded,
        o.lost,
        if s.fully_protected {
            ""
        } else {
            "  (NOT fully protected)"
        }
    );
    if o.fragments_missing > 0 || s.repair.rebuilt_fragments > 0 {
        println!(
            "repair: {} fragments ({} MiB) missing; this node rebuilt {} ({} MiB) at {:.1} MiB/s{}",
            o.fragments_missing,
            o.bytes_missing >> 20,
            s.repair.rebuilt_fragments,
            s.repair.rebuilt_bytes >> 20,
            s.repair.rate_mib_s,
            match (s.repair.eta_seconds, s.repair.state.as_str()) {
                (Some(e), _) => format!(", ETA {e:.0} s"),
                (None, "waiting") => ", no progress in the last 30 s (fragments on nodes \
                    down within their repair grace, or no drive can take them)"
                    .into(),
                _ => String::new(),
            }
        );
    }
    println!("nodes:");
    for n in &s.nodes {
        println!(
            "  {}  {:<4}{}{}  S3 {}  drives {}  domain {}",
            n.id,
            n.state,
            if n.leader {
                " leader"
            } else if n.voter {
                " voter "
            } else {
                "       "
            },
            if n.draining { " draining" } else { "" },
            n.s3,
            n.drives,
            n.domain
        );
    }
    Ok(())
}

pub async fn drain(t: &Target, node: &str) -> Result<(), NodectlError> {
    let epoch = t
        .api()?
        .cluster_drain(&NodeRequest {
            node: node.to_string(),
            force: false,
        })
        .await?;
    println!("node {node} draining (map epoch {epoch}); repair moves its fragments");
    Ok(())
}

pub async fn remove(t: &Target, node: &str, force: bool) -> Result<(), NodectlError> {
    t.api()?
        .cluster_remove(&NodeRequest {
            node: node.to_string(),
            force,
        })
        .await?;
    println!("node {node} removed");
    Ok(())
}
