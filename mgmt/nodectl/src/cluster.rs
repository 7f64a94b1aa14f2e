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
    /// An admin certificate (PEM, from `nodectl cert issue`) for an
    /// `--admin https://...` address: it stands in for a token.
    #[arg(long, env = "CAIRN_ADMIN_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The admin certificate's key (PEM).
    #[arg(long, env = "CAIRN_ADMIN_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
    /// The cluster CA (PEM) an `https://` admin address is checked against.
    #[arg(long, env = "CAIRN_ADMIN_CA")]
    pub ca: Option<PathBuf>,
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
            Some(addr) if addr.trim().starts_with("https://") => self.tls_api(&addr),
            Some(addr) => match env("CAIRN_ADMIN_TOKEN") {
                Some(t) => Ok(AdminClient::new(&addr, t.trim())),
                None => Ok(AdminClient::from_token_file(&addr, &self.token_file)?),
            },
            None => crate::admin::of_dev(&self.data, self.node),
        }
    }

    /// An `https://` admin address: the cluster CA, then the admin certificate
    /// (no token needed) or, without one, a token as over plain HTTP.
    fn tls_api(&self, addr: &str) -> Result<AdminClient, NodectlError> {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(crate::io_err(format!("read {}", p.display())));
        let ca = self.ca.as_ref().ok_or_else(|| {
            NodectlError::Usage(
                "an https:// admin address needs --ca (the cluster CA, as `nodectl cert issue` wrote it)"
                    .into(),
            )
        })?;
        let ca = read(ca)?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let client = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => {
                AdminClient::new(addr, "").with_tls(&ca, Some((&read(c)?, &read(k)?)))?
            }
            _ => match env("CAIRN_ADMIN_TOKEN") {
                Some(t) => AdminClient::new(addr, t.trim()).with_tls(&ca, None)?,
                None => {
                    AdminClient::from_token_file(addr, &self.token_file)?.with_tls(&ca, None)?
                }
            },
        };
        Ok(client)
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

pub async fn drain(t: &Target, node: &str, follow: bool) -> Result<(), NodectlError> {
    let api = t.api()?;
    let epoch = api
        .cluster_drain(&NodeRequest {
            node: node.to_string(),
            force: false,
        })
        .await?;
    println!("node {node} draining (map epoch {epoch}); repair moves its fragments");
    if follow {
        follow_repair(&api).await?;
        println!("node {node} drained: nothing left to move (`nodectl node remove {node}`)");
    }
    Ok(())
}

/// Follows repair until no fragment is missing: a progress bar on a terminal,
/// a line every 10 s otherwise (logs, scripts).
pub async fn follow_repair(api: &AdminClient) -> Result<(), NodectlError> {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    let pb = if tty {
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {pos}/{len} fragments  {prefix}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message("moving");
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut most = 0u64;
    let mut last_line = std::time::Instant::now();
    // A drain takes effect when the map change applies: the first readings may
    // not show its fragments missing yet.
    let mut settled = 0;
    loop {
        let s = api.cluster_status().await?;
        let missing = s.objects.fragments_missing;
        most = most.max(missing);
        let eta = s
            .repair
            .eta_seconds
            .map_or(String::new(), |e| format!("eta {e:.0} s"));
        pb.set_length(most);
        pb.set_position(most - missing);
        pb.set_prefix(format!(
            "{:.1} MiB/s {eta} ({})",
            s.repair.rate_mib_s, s.repair.state
        ));
        if !tty && last_line.elapsed() >= std::time::Duration::from_secs(10) {
            println!(
                "repair: {missing} fragments to go of {most}, {:.1} MiB/s {eta} ({})",
                s.repair.rate_mib_s, s.repair.state
            );
            last_line = std::time::Instant::now();
        }
        if missing == 0 && s.repair.state == "idle" {
            settled += 1;
            if settled >= 3 {
                break;
            }
        } else {
            settled = 0;
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
    pb.finish_and_clear();
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
