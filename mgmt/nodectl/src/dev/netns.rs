//! A local cluster in network namespaces (`dev up --netns`), so links between nodes
//! can be cut (`dev partition`) and restored (`dev heal`).

use crate::{io_err, NodectlError};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::Path;

/// The virtual network of a local cluster in namespaces: a bridge in the host's
/// namespace, and one namespace per node joined to it by a veth pair.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Netns {
    /// Short tag naming the bridge, veths and namespaces of this data directory.
    pub tag: String,
    /// Namespace of node K: `namespaces[K-1]`.
    pub namespaces: Vec<String>,
    pub bridge: String,
}

impl Netns {
    pub(super) fn for_data(data: &Path, nodes: u16) -> Netns {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in data.as_os_str().as_encoded_bytes() {
            h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        let tag = format!("{:04x}", h & 0xffff);
        Netns {
            namespaces: (1..=nodes).map(|n| format!("cairn-{tag}-n{n}")).collect(),
            bridge: format!("cbr{tag}"),
            tag,
        }
    }

    /// 10.77.X.0/24: X from the tag, so two clusters rarely share a subnet.
    fn subnet(&self) -> u8 {
        (u16::from_str_radix(&self.tag, 16).unwrap_or(0) % 250) as u8
    }

    pub(super) fn ip(&self, n: u16) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet(), n as u8)
    }

    pub(super) fn create(&self) -> Result<(), NodectlError> {
        self.destroy();
        let br = &self.bridge;
        let host = format!("10.77.{}.254/24", self.subnet());
        ip(&["link", "add", br, "type", "bridge"])?;
        ip(&["addr", "add", &host, "dev", br])?;
        ip(&["link", "set", br, "up"])?;
        for (i, ns) in self.namespaces.iter().enumerate() {
            let n = i as u16 + 1;
            let (outer, inner) = (format!("cv{}n{n}", self.tag), format!("cw{}n{n}", self.tag));
            let addr = format!("{}/24", self.ip(n));
            ip(&["netns", "add", ns])?;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &outer, "master", br, "up"])?;
            ip(&["link", "set", &inner, "netns", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", &inner, "name", "eth0"])?;
            ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    pub(super) fn destroy(&self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

fn ip(args: &[&str]) -> Result<(), NodectlError> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(io_err("run ip (iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NodectlError::Daemon(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// `nodectl dev partition A,B,...`: cuts every link between the listed nodes and
/// the others (blackhole routes in both directions inside the namespaces; the host
/// still reaches every node, so clients can try both sides).
pub fn partition(data: &Path, side: &[u16]) -> Result<(), NodectlError> {
    let s = super::state::read(data)?;
    let ns = s.netns.as_ref().ok_or_else(|| {
        NodectlError::Usage("partitions need a cluster started with --netns".into())
    })?;
    for n in &s.nodes {
        if !side.contains(&n.node) {
            continue;
        }
        for m in s.nodes.iter().filter(|m| !side.contains(&m.node)) {
            let (a, b) = (
                &ns.namespaces[n.node as usize - 1],
                &ns.namespaces[m.node as usize - 1],
            );
            ip(&[
                "-n",
                a,
                "route",
                "add",
                "blackhole",
                &format!("{}/32", ns.ip(m.node)),
            ])?;
            ip(&[
                "-n",
                b,
                "route",
                "add",
                "blackhole",
                &format!("{}/32", ns.ip(n.node)),
            ])?;
        }
    }
    println!("partitioned: nodes {side:?} cut off from the others");
    Ok(())
}

/// `nodectl dev heal`: removes every cut.
pub fn heal(data: &Path) -> Result<(), NodectlError> {
    let s = super::state::read(data)?;
    let ns = s.netns.as_ref().ok_or_else(|| {
        NodectlError::Usage("partitions need a cluster started with --netns".into())
    })?;
    for n in &ns.namespaces {
        ip(&["-n", n, "route", "flush", "type", "blackhole"])?;
    }
    println!("healed: every link restored");
    Ok(())
}
