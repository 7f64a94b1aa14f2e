//! `nodectl node bmc` and `nodectl node power`: each node's BMC, and its power
//! through that BMC (IPMI over the management network, RMCP+).

use crate::cluster::Target;
use crate::scrub::when;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::{BmcSettings, BmcView, PowerAction};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum BmcCmd {
    /// How the cluster reaches a node's BMC. The BMC is asked for its power
    /// state first: wrong credentials are refused and nothing is kept.
    Set {
        /// Node id (hex, or a unique prefix).
        id: String,
        /// HOST:PORT of the BMC's IPMI LAN (RMCP+) service; port 623 normally.
        #[arg(long)]
        address: String,
        /// A BMC user with the administrator privilege.
        #[arg(long)]
        user: String,
        /// A file holding the BMC password (its first line); `-` reads stdin.
        /// Kept sealed by the cluster's master key.
        #[arg(long)]
        password_file: PathBuf,
        /// Let the cluster power the node off (fence it) when it has been down
        /// past the repair grace, before rebuilding its data.
        #[arg(long)]
        fence: bool,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// One node's BMC, or every node's (never the password).
    Show {
        id: Option<String>,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Forget a node's BMC (no more power control or fencing of it).
    Clear {
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(clap::Args, Debug)]
pub struct PowerArgs {
    /// Node id (hex, or a unique prefix).
    id: String,
    /// status, on, off, cycle (off then on), reset (hard) or soft (ACPI
    /// power button: a clean shutdown).
    #[arg(value_parser = ["status", "on", "off", "cycle", "reset", "soft"])]
    action: Option<String>,
    #[command(flatten)]
    target: Target,
    #[arg(long)]
    json: bool,
}

fn line(b: &BmcView) -> String {
    let fenced = b
        .fenced_ms
        .map(|ms| format!("  FENCED {}", when(ms)))
        .unwrap_or_default();
    format!(
        "{}  {:<22} user {:<10} fencing {:<3}  set {} by {}{fenced}",
        b.node,
        b.address,
        b.user,
        if b.fence { "on" } else { "off" },
        when(b.set_ms),
        b.set_by,
    )
}

pub async fn bmc(cmd: BmcCmd) -> Result<(), NodectlError> {
    match cmd {
        BmcCmd::Set {
            id,
            address,
            user,
            password_file,
            fence,
            target,
            json,
        } => {
            let password = crate::read_secret(&password_file, "BMC password")?;
            let s = BmcSettings {
                address,
                user,
                password,
                fence,
            };
            let v = target.api()?.bmc_set(&id, &s).await?;
            if json {
                print_json(&v);
            } else {
                println!("{}", line(&v));
            }
        }
        BmcCmd::Show { id, target, json } => {
            let api = target.api()?;
            let all = match id {
                Some(id) => vec![api.bmc(&id).await?],
                None => api.bmcs().await?,
            };
            if json {
                print_json(&all);
            } else if all.is_empty() {
                println!("no node has a BMC set (nodectl node bmc set ID --address HOST:623 ...)");
            } else {
                for b in &all {
                    println!("{}", line(b));
                }
            }
        }
        BmcCmd::Clear { id, target } => {
            target.api()?.bmc_clear(&id).await?;
            println!("node {id}: BMC forgotten");
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct SensorsArgs {
    /// Node id (hex, or a unique prefix).
    id: String,
    #[command(flatten)]
    target: Target,
    #[arg(long)]
    json: bool,
}

/// `nodectl node sensors ID`: the node's threshold sensors, read now.
pub async fn sensors(a: SensorsArgs) -> Result<(), NodectlError> {
    let v = a.target.api()?.sensors(&a.id).await?;
    if a.json {
        print_json(&v);
        return Ok(());
    }
    println!(
        "node {}: {} sensors ({})",
        v.node,
        v.sensors.len(),
        v.source
    );
    if v.sensors.is_empty() {
        return Ok(());
    }
    println!(
        "{:<18}{:<14}{:>12}  {:<16}THRESHOLDS",
        "SENSOR", "KIND", "READING", "LEVEL"
    );
    for s in &v.sensors {
        let reading = s
            .value
            .map_or_else(|| "-".to_string(), |x| format!("{x} {}", s.unit));
        let thresholds: Vec<String> = s
            .thresholds
            .iter()
            .map(|(name, t)| format!("{name} {t}"))
            .collect();
        println!(
            "{:<18}{:<14}{:>12}  {:<16}{}",
            s.name,
            s.kind,
            reading.trim_end(),
            s.level.name(),
            thresholds.join(", ")
        );
    }
    Ok(())
}

pub async fn power(a: PowerArgs) -> Result<(), NodectlError> {
    let api = a.target.api()?;
    let v = match a.action.as_deref().and_then(PowerAction::parse) {
        None => api.power_status(&a.id).await?,
        Some(action) => api.power(&a.id, action).await?,
    };
    if a.json {
        print_json(&v);
        return Ok(());
    }
    let state = serde_json::to_value(v.state)
        .ok()
        .and_then(|s| s.as_str().map(str::to_string))
        .unwrap_or_default();
    match v.action {
        None => println!("node {}: power {state} (BMC {})", v.node, v.bmc),
        Some(act) => println!(
            "node {}: power {} sent; the BMC ({}) now reports power {state}",
            v.node,
            act.name(),
            v.bmc
        ),
    }
    Ok(())
}
