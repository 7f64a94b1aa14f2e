//! The network from `[network]`: a plan computed from the config and the NICs in
//! `/sys/class/net` (pure, tested against fake trees), then applied through rtnetlink.
//!
//! Applying is idempotent, so nodeos can run again in the same boot: links, addresses and
//! routes that already exist are left as they are (routes and addresses are replaced).

use crate::NodeosError;
use cairn_nodeconfig::{BondMode, Cidr, Network, Route, RouteDest};
use futures::TryStreamExt;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One change to the network, in the order they must happen.
#[derive(Clone, Debug, PartialEq)]
pub enum NetStep {
    /// Give a NIC matched by MAC the configured name.
    Rename {
        from: String,
        to: String,
    },
    CreateBond {
        name: String,
        mode: BondMode,
    },
    /// Make `link` a port of `bond` (it is set down first, as the kernel requires).
    Enslave {
        link: String,
        bond: String,
    },
    CreateVlan {
        name: String,
        parent: String,
        id: u16,
    },
    SetMtu {
        link: String,
        mtu: u32,
    },
    Up {
        link: String,
    },
    AddAddress {
        link: String,
        cidr: Cidr,
    },
    Dhcp {
        link: String,
    },
    AddRoute(Route),
}

/// NICs the kernel has: name -> MAC (lowercase), from `<sys>/class/net/*/address`.
pub fn links(sys: &Path) -> BTreeMap<String, String> {
    let dir = sys.join("class/net");
    std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|d| {
                    let name = d.file_name().to_string_lossy().into_owned();
                    let mac = crate::read_attr(&dir.join(&name).join("address"))?;
                    (name != "lo").then(|| (name, mac.to_ascii_lowercase()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn net_err(field: String, message: String) -> NodeosError {
    NodeosError::Network(format!("{field}: {message}"))
}

/// Turn the config into steps against the NICs in `sys`. Every name the config uses
/// must exist (or be created by it); errors name the config field.
pub fn plan(net: &Network, sys: &Path) -> Result<Vec<NetStep>, NodeosError> {
    let mut phys = links(sys);
    let list = |phys: &BTreeMap<String, String>| {
        let v: Vec<String> = phys.iter().map(|(n, m)| format!("{n} {m}")).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut steps = Vec::new();
    // Kernel name of each configured interface.
    let mut names: Vec<String> = Vec::new();
    for (i, ifc) in net.interface.iter().enumerate() {
        let field = |k: &str| format!("network.interface[{i}]{k}");
        let resolved = if ifc.bond.is_some() || ifc.vlan.is_some() {
            ifc.name.clone().unwrap_or_default()
        } else if let Some(mac) = &ifc.mac {
            let want = mac.to_string();
            let found = phys
                .iter()
                .find(|(_, m)| **m == want)
                .map(|(n, _)| n.clone())
                .ok_or_else(|| {
                    net_err(
                        field(".mac"),
                        format!("no NIC has MAC {want} (NICs: {})", list(&phys)),
                    )
                })?;
            match &ifc.name {
                Some(n) if *n != found => {
                    if phys.contains_key(n) {
                        return Err(net_err(
                            field(".name"),
                            format!("cannot rename {found} to `{n}`: a link of that name exists"),
                        ));
                    }
                    steps.push(NetStep::Rename {
                        from: found.clone(),
                        to: n.clone(),
                    });
                    let m = phys.remove(&found).unwrap_or_default();
                    phys.insert(n.clone(), m);
                    n.clone()
                }
                _ => found,
            }
        } else {
            let n = ifc.name.clone().unwrap_or_default();
            if !phys.contains_key(&n) {
                return Err(net_err(
                    field(".name"),
                    format!("no link `{n}` (NICs: {})", list(&phys)),
                ));
            }
            n
        };
        names.push(resolved);
    }

    let mut known: Vec<String> = phys.keys().cloned().collect();
    let mut members: Vec<String> = Vec::new();
    for (i, ifc) in net.interface.iter().enumerate() {
        let Some(b) = &ifc.bond else { continue };
        let name = names[i].clone();
        if phys.contains_key(&name) {
            return Err(net_err(
                format!("network.interface[{i}].name"),
                format!("`{name}` is a NIC; a bond needs a new name"),
            ));
        }
        steps.push(NetStep::CreateBond {
            name: name.clone(),
            mode: b.mode,
        });
        for (j, m) in b.members.iter().enumerate() {
            let f = format!("network.interface[{i}].bond.members[{j}]");
            if !phys.contains_key(m) {
                return Err(net_err(f, format!("no NIC `{m}` (NICs: {})", list(&phys))));
            }
            if members.contains(m) {
                return Err(net_err(f, format!("`{m}` is already a member of a bond")));
            }
            members.push(m.clone());
            steps.push(NetStep::Enslave {
                link: m.clone(),
                bond: name.clone(),
            });
        }
        known.push(name);
    }
    let mut vlan_parents = Vec::new();
    for (i, ifc) in net.interface.iter().enumerate() {
        let Some(v) = &ifc.vlan else { continue };
        let name = names[i].clone();
        if known.contains(&name) {
            return Err(net_err(
                format!("network.interface[{i}].name"),
                format!("`{name}` already exists; a VLAN needs a new name"),
            ));
        }
        if !known.contains(&v.parent) {
            return Err(net_err(
                format!("network.interface[{i}].vlan.parent"),
                format!(
                    "no link `{}` (a NIC, or a bond or VLAN defined before it)",
                    v.parent
                ),
            ));
        }
        steps.push(NetStep::CreateVlan {
            name: name.clone(),
            parent: v.parent.clone(),
            id: v.id,
        });
        vlan_parents.push(v.parent.clone());
        known.push(name);
    }
    for (i, ifc) in net.interface.iter().enumerate() {
        if members.contains(&names[i]) && !ifc.addresses.is_empty() {
            return Err(net_err(
                format!("network.interface[{i}].addresses"),
                format!(
                    "`{}` is a bond member; put its addresses on the bond",
                    names[i]
                ),
            ));
        }
    }

    // MTU: a VLAN's cannot exceed its parent's, so parents first.
    let is_vlan = |i: usize| net.interface[i].vlan.is_some();
    for pass_vlans in [false, true] {
        for (i, ifc) in net.interface.iter().enumerate() {
            if let (Some(mtu), true) = (ifc.mtu, is_vlan(i) == pass_vlans) {
                steps.push(NetStep::SetMtu {
                    link: names[i].clone(),
                    mtu,
                });
            }
        }
    }
    // Up: bond members, then NICs and bonds, then VLAN parents, then VLANs.
    let mut up: Vec<String> = members.clone();
    for (i, _) in net
        .interface
        .iter()
        .enumerate()
        .filter(|(i, _)| !is_vlan(*i))
    {
        up.push(names[i].clone());
    }
    up.extend(vlan_parents);
    for (i, _) in net
        .interface
        .iter()
        .enumerate()
        .filter(|(i, _)| is_vlan(*i))
    {
        up.push(names[i].clone());
    }
    let mut seen = Vec::new();
    for l in up {
        if !seen.contains(&l) {
            steps.push(NetStep::Up { link: l.clone() });
            seen.push(l);
        }
    }
    for (i, ifc) in net.interface.iter().enumerate() {
        for c in &ifc.addresses {
            steps.push(NetStep::AddAddress {
                link: names[i].clone(),
                cidr: *c,
            });
        }
    }
    for (i, ifc) in net.interface.iter().enumerate() {
        if ifc.dhcp {
            steps.push(NetStep::Dhcp {
                link: names[i].clone(),
            });
        }
    }
    for (i, r) in net.route.iter().enumerate() {
        if let Some(d) = &r.dev {
            if !known.contains(d) {
                return Err(net_err(
                    format!("network.route[{i}].dev"),
                    format!("no link `{d}`"),
                ));
            }
        }
        steps.push(NetStep::AddRoute(r.clone()));
    }
    Ok(steps)
}

/// The DHCP client to run: Debian's dhclient, else busybox's udhcpc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DhcpClient {
    Dhclient(PathBuf),
    Udhcpc(PathBuf),
    /// `busybox udhcpc`.
    Busybox(PathBuf),
}

impl DhcpClient {
    /// Look in `dirs` (`/sbin`, `/usr/sbin`, `/bin`, `/usr/bin` on a node).
    pub fn find(dirs: &[PathBuf]) -> Option<DhcpClient> {
        let find = |n: &str| dirs.iter().map(|d| d.join(n)).find(|p| p.is_file());
        find("dhclient")
            .map(DhcpClient::Dhclient)
            .or_else(|| find("udhcpc").map(DhcpClient::Udhcpc))
            .or_else(|| find("busybox").map(DhcpClient::Busybox))
    }

    /// The command line that gets one lease on `link`. dhclient keeps its lease and pid
    /// files in `run` (the root is read-only) and stays running to renew.
    pub fn command(&self, link: &str, run: &Path) -> Command {
        match self {
            DhcpClient::Dhclient(p) => {
                let mut c = Command::new(p);
                c.arg("-1")
                    .arg("-lf")
                    .arg(run.join(format!("dhclient.{link}.leases")))
                    .arg("-pf")
                    .arg(run.join(format!("dhclient.{link}.pid")))
                    .arg(link);
                c
            }
            DhcpClient::Udhcpc(p) => {
                let mut c = Command::new(p);
                c.args(["-i", link, "-n", "-q"]);
                c
            }
            DhcpClient::Busybox(p) => {
                let mut c = Command::new(p);
                c.args(["udhcpc", "-i", link, "-n", "-q"]);
                c
            }
        }
    }

    /// DNS servers the lease gave, where the client records them (dhclient only).
    pub fn lease_dns(&self, link: &str, run: &Path) -> Vec<IpAddr> {
        match self {
            DhcpClient::Dhclient(_) => {
                std::fs::read_to_string(run.join(format!("dhclient.{link}.leases")))
                    .map(|t| lease_dns(&t))
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }
}

/// `option domain-name-servers a, b;` of the last lease in a dhclient lease file.
pub fn lease_dns(text: &str) -> Vec<IpAddr> {
    text.lines()
        .rev()
        .find_map(|l| {
            l.trim()
                .strip_prefix("option domain-name-servers")
                .map(|r| r.trim().trim_end_matches(';').to_string())
        })
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// What applying the plan learned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetReport {
    /// DNS servers from DHCP leases.
    pub dhcp_dns: Vec<IpAddr>,
    /// Links where DHCP got no lease (the client keeps trying in the background).
    pub dhcp_failed: Vec<String>,
}

/// Applies a plan to the running kernel. A trait so bring-up is tested without one.
pub trait NetworkApplier {
    fn apply(&self, steps: &[NetStep], run: &Path) -> Result<NetReport, NodeosError>;
}

/// rtnetlink on the current network namespace, with a DHCP client for `Dhcp` steps.
#[derive(Clone, Debug)]
pub struct Rtnetlink {
    pub dhcp: Option<DhcpClient>,
}

impl NetworkApplier for Rtnetlink {
    fn apply(&self, steps: &[NetStep], run: &Path) -> Result<NetReport, NodeosError> {
        if steps.is_empty() {
            return Ok(NetReport::default());
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| NodeosError::Network(format!("runtime: {e}")))?;
        rt.block_on(apply(steps, self.dhcp.as_ref(), run))
    }
}

fn nl_err(what: String, e: rtnetlink::Error) -> NodeosError {
    NodeosError::Network(format!("{what}: {e}"))
}

fn already_exists(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m)
        if m.to_io().kind() == std::io::ErrorKind::AlreadyExists)
}

async fn index(h: &rtnetlink::Handle, name: &str) -> Result<u32, NodeosError> {
    h.link()
        .get()
        .match_name(name.to_string())
        .execute()
        .try_next()
        .await
        .map_err(|e| nl_err(format!("link {name}"), e))?
        .map(|m| m.header.index)
        .ok_or_else(|| NodeosError::Network(format!("link {name} does not exist")))
}

async fn link_exists(h: &rtnetlink::Handle, name: &str) -> bool {
    index(h, name).await.is_ok()
}

/// Apply `steps` through rtnetlink (inside a tokio runtime).
pub async fn apply(
    steps: &[NetStep],
    dhcp: Option<&DhcpClient>,
    run: &Path,
) -> Result<NetReport, NodeosError> {
    use rtnetlink::{LinkBond, LinkUnspec, LinkVlan};
    let (conn, h, _) =
        rtnetlink::new_connection().map_err(|e| NodeosError::Network(format!("netlink: {e}")))?;
    let conn = tokio::spawn(conn);
    let mut report = NetReport::default();
    let res: Result<(), NodeosError> = async {
        for step in steps {
            tracing::debug!(?step, "network");
            match step {
                NetStep::Rename { from, to } => {
                    if !link_exists(&h, from).await && link_exists(&h, to).await {
                        continue; // renamed by an earlier run
                    }
                    let i = index(&h, from).await?;
                    h.link()
                        .set(LinkUnspec::new_with_index(i).down().build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("set {from} down"), e))?;
                    h.link()
                        .set(LinkUnspec::new_with_index(i).name(to.clone()).build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("rename {from} to {to}"), e))?;
                }
                NetStep::CreateBond { name, mode } => {
                    let msg = LinkBond::new(name)
                        .mode(mode.kernel_mode().into())
                        .miimon(100)
                        .build();
                    match h.link().add(msg).execute().await {
                        Ok(()) => {}
                        Err(e) if already_exists(&e) => {}
                        Err(e) => return Err(nl_err(format!("create bond {name}"), e)),
                    }
                }
                NetStep::Enslave { link, bond } => {
                    let b = index(&h, bond).await?;
                    let l = index(&h, link).await?;
                    h.link()
                        .set(LinkUnspec::new_with_index(l).down().build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("set {link} down"), e))?;
                    h.link()
                        .set(LinkUnspec::new_with_index(l).controller(b).build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("add {link} to bond {bond}"), e))?;
                }
                NetStep::CreateVlan { name, parent, id } => {
                    let p = index(&h, parent).await?;
                    match h
                        .link()
                        .add(LinkVlan::new(name, p, *id).build())
                        .execute()
                        .await
                    {
                        Ok(()) => {}
                        Err(e) if already_exists(&e) => {}
                        Err(e) => return Err(nl_err(format!("create VLAN {name}"), e)),
                    }
                }
                NetStep::SetMtu { link, mtu } => {
                    let i = index(&h, link).await?;
                    h.link()
                        .set(LinkUnspec::new_with_index(i).mtu(*mtu).build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("set MTU {mtu} on {link}"), e))?;
                }
                NetStep::Up { link } => {
                    let i = index(&h, link).await?;
                    h.link()
                        .set(LinkUnspec::new_with_index(i).up().build())
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("set {link} up"), e))?;
                }
                NetStep::AddAddress { link, cidr } => {
                    let i = index(&h, link).await?;
                    h.address()
                        .add(i, cidr.addr, cidr.prefix)
                        .replace()
                        .execute()
                        .await
                        .map_err(|e| nl_err(format!("add {cidr} to {link}"), e))?;
                }
                NetStep::Dhcp { link } => {
                    run_dhcp(dhcp, link, run, &mut report);
                }
                NetStep::AddRoute(r) => add_route(&h, r).await?,
            }
        }
        Ok(())
    }
    .await;
    conn.abort();
    res.map(|()| report)
}

fn run_dhcp(dhcp: Option<&DhcpClient>, link: &str, run: &Path, report: &mut NetReport) {
    let Some(client) = dhcp else {
        tracing::error!("DHCP on {link}: no DHCP client (dhclient or udhcpc) in the image");
        report.dhcp_failed.push(link.to_string());
        return;
    };
    let mut cmd = client.command(link, run);
    tracing::info!("DHCP on {link}: {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => report.dhcp_dns.extend(client.lease_dns(link, run)),
        Ok(s) => {
            tracing::warn!("DHCP on {link}: no lease ({s})");
            report.dhcp_failed.push(link.to_string());
            // dhclient without -1 keeps trying in the background and renews once bound.
            if let DhcpClient::Dhclient(p) = client {
                let _ = Command::new(p)
                    .arg("-nw")
                    .arg("-lf")
                    .arg(run.join(format!("dhclient.{link}.leases")))
                    .arg("-pf")
                    .arg(run.join(format!("dhclient.{link}.pid")))
                    .arg(link)
                    .status();
            }
        }
        Err(e) => {
            tracing::error!("DHCP on {link}: cannot run {cmd:?}: {e}");
            report.dhcp_failed.push(link.to_string());
        }
    }
}

async fn add_route(h: &rtnetlink::Handle, r: &Route) -> Result<(), NodeosError> {
    use rtnetlink::packet_route::route::RouteScope;
    use rtnetlink::RouteMessageBuilder;
    use std::net::{Ipv4Addr, Ipv6Addr};
    let oif = match &r.dev {
        Some(d) => Some(index(h, d).await?),
        None => None,
    };
    let v6 = match (r.to, r.via) {
        (RouteDest::Net(c), _) => c.addr.is_ipv6(),
        (RouteDest::Default, Some(via)) => via.is_ipv6(),
        (RouteDest::Default, None) => false,
    };
    let what = format!(
        "route {} via {}",
        match r.to {
            RouteDest::Default => "default".to_string(),
            RouteDest::Net(c) => c.to_string(),
        },
        r.via.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
    );
    let msg = if v6 {
        let mut b = RouteMessageBuilder::<Ipv6Addr>::new();
        if let RouteDest::Net(Cidr {
            addr: IpAddr::V6(a),
            prefix,
        }) = r.to
        {
            b = b.destination_prefix(a, prefix);
        }
        match r.via {
            Some(IpAddr::V6(g)) => b = b.gateway(g),
            Some(IpAddr::V4(_)) => {
                return Err(NodeosError::Network(format!("{what}: mixed IP families")))
            }
            None => b = b.scope(RouteScope::Link),
        }
        if let Some(i) = oif {
            b = b.output_interface(i);
        }
        if let Some(m) = r.metric {
            b = b.priority(m);
        }
        b.build()
    } else {
        let mut b = RouteMessageBuilder::<Ipv4Addr>::new();
        if let RouteDest::Net(Cidr {
            addr: IpAddr::V4(a),
            prefix,
        }) = r.to
        {
            b = b.destination_prefix(a, prefix);
        }
        match r.via {
            Some(IpAddr::V4(g)) => b = b.gateway(g),
            Some(IpAddr::V6(_)) => {
                return Err(NodeosError::Network(format!("{what}: mixed IP families")))
            }
            None => b = b.scope(RouteScope::Link),
        }
        if let Some(i) = oif {
            b = b.output_interface(i);
        }
        if let Some(m) = r.metric {
            b = b.priority(m);
        }
        b.build()
    };
    h.route()
        .add(msg)
        .replace()
        .execute()
        .await
        .map_err(|e| nl_err(what, e))
}

/// Where to look for a DHCP client on a node.
pub fn default_bin_dirs() -> Vec<PathBuf> {
    ["/sbin", "/usr/sbin", "/bin", "/usr/bin"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_nodeconfig::NodeConfig;
    use std::fs;

    fn sys(nics: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (n, mac) in nics.iter().chain([("lo", "00:00:00:00:00:00")].iter()) {
            let p = d.path().join("class/net").join(n);
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("address"), format!("{mac}\n")).unwrap();
        }
        d
    }

    fn net(toml_network: &str) -> Network {
        let text = format!(
            "hostname = \"n\"\n[s3]\naccess_key = \"abc\"\nsecret_key = \"12345678\"\n\
             [drives]\nallow_empty = true\n{toml_network}"
        );
        NodeConfig::parse(&text, "test").unwrap().network
    }

    #[test]
    fn static_interface_by_mac_is_renamed_addressed_and_routed() {
        let s = sys(&[("ens3", "52:54:00:00:00:01"), ("ens4", "52:54:00:00:00:02")]);
        let n = net(r#"[[network.interface]]
name = "lan0"
mac = "52:54:00:00:00:02"
addresses = ["10.0.0.5/24", "fd00::5/64"]
mtu = 9000
[[network.route]]
to = "default"
via = "10.0.0.1"
"#);
        let p = plan(&n, s.path()).unwrap();
        use NetStep::*;
        assert_eq!(
            p,
            vec![
                Rename {
                    from: "ens4".into(),
                    to: "lan0".into()
                },
                SetMtu {
                    link: "lan0".into(),
                    mtu: 9000
                },
                Up {
                    link: "lan0".into()
                },
                AddAddress {
                    link: "lan0".into(),
                    cidr: "10.0.0.5/24".parse().unwrap()
                },
                AddAddress {
                    link: "lan0".into(),
                    cidr: "fd00::5/64".parse().unwrap()
                },
                AddRoute(n.route[0].clone()),
            ]
        );
    }

    #[test]
    fn bonds_and_vlans_are_created_in_dependency_order() {
        let s = sys(&[("eth0", "52:54:00:00:00:01"), ("eth1", "52:54:00:00:00:02")]);
        let n = net(r#"[[network.interface]]
name = "st0"
vlan = { parent = "bond0", id = 100 }
addresses = ["10.1.0.5/24"]
mtu = 8996
[[network.interface]]
name = "bond0"
bond = { mode = "802.3ad", members = ["eth0", "eth1"] }
mtu = 9000
dhcp = true
[[network.route]]
to = "10.2.0.0/16"
via = "10.1.0.1"
dev = "st0"
metric = 50
"#);
        // The VLAN is listed first but needs the bond: the bond is a forward reference
        // only for creation order, which the plan fixes.
        let p = plan(&n, s.path()).unwrap();
        use NetStep::*;
        let pos = |s: &NetStep| p.iter().position(|x| x == s).unwrap();
        let bond = pos(&CreateBond {
            name: "bond0".into(),
            mode: BondMode::Lacp,
        });
        let vlan = pos(&CreateVlan {
            name: "st0".into(),
            parent: "bond0".into(),
            id: 100,
        });
        let ens0 = pos(&Enslave {
            link: "eth0".into(),
            bond: "bond0".into(),
        });
        assert!(bond < ens0 && ens0 < vlan);
        let mtu_bond = pos(&SetMtu {
            link: "bond0".into(),
            mtu: 9000,
        });
        let mtu_vlan = pos(&SetMtu {
            link: "st0".into(),
            mtu: 8996,
        });
        assert!(mtu_bond < mtu_vlan, "parent MTU first");
        let up = |l: &str| pos(&Up { link: l.into() });
        assert!(up("eth0") < up("bond0") && up("bond0") < up("st0"));
        assert!(
            pos(&Dhcp {
                link: "bond0".into()
            }) > up("bond0")
        );
        assert_eq!(p.last(), Some(&AddRoute(n.route[0].clone())));
        assert_eq!(p.iter().filter(|s| matches!(s, Up { .. })).count(), 4);
    }

    #[test]
    fn unknown_names_are_errors_naming_the_field() {
        let s = sys(&[("eth0", "52:54:00:00:00:01")]);
        let cases = [
            (
                "[[network.interface]]\nname = \"eth9\"\n",
                "network.interface[0].name: no link `eth9` (NICs: eth0 52:54:00:00:00:01)",
            ),
            (
                "[[network.interface]]\nmac = \"52:54:00:00:00:09\"\n",
                "network.interface[0].mac: no NIC has MAC 52:54:00:00:00:09",
            ),
            (
                "[[network.interface]]\nname = \"b0\"\nbond = { mode = \"active-backup\", members = [\"eth1\"] }\n",
                "network.interface[0].bond.members[0]: no NIC `eth1`",
            ),
            (
                "[[network.interface]]\nname = \"v0\"\nvlan = { parent = \"b9\", id = 5 }\n",
                "network.interface[0].vlan.parent: no link `b9`",
            ),
            (
                "[[network.interface]]\nname = \"eth0\"\n[[network.route]]\nto = \"default\"\nvia = \"10.0.0.1\"\ndev = \"eth7\"\n",
                "network.route[0].dev: no link `eth7`",
            ),
            (
                "[[network.interface]]\nname = \"eth0\"\nbond = { mode = \"active-backup\", members = [\"eth0\"] }\n",
                "`eth0` is a NIC; a bond needs a new name",
            ),
            (
                "[[network.interface]]\nname = \"b0\"\nbond = { mode = \"active-backup\", members = [\"eth0\"] }\n[[network.interface]]\nname = \"eth0\"\naddresses = [\"10.0.0.1/24\"]\n",
                "`eth0` is a bond member; put its addresses on the bond",
            ),
        ];
        for (cfg, want) in cases {
            let e = plan(&net(cfg), s.path()).unwrap_err().to_string();
            assert!(e.contains(want), "want `{want}` in `{e}`");
        }
    }

    #[test]
    fn no_network_config_plans_nothing() {
        let s = sys(&[("eth0", "52:54:00:00:00:01")]);
        assert!(plan(&net(""), s.path()).unwrap().is_empty());
    }

    #[test]
    fn dhcp_client_is_found_and_called_with_state_in_run() {
        let d = tempfile::tempdir().unwrap();
        let (sbin, bin) = (d.path().join("sbin"), d.path().join("bin"));
        fs::create_dir_all(&sbin).unwrap();
        fs::create_dir_all(&bin).unwrap();
        let dirs = vec![sbin.clone(), bin.clone()];
        assert_eq!(DhcpClient::find(&dirs), None);
        fs::write(bin.join("busybox"), "").unwrap();
        assert_eq!(
            DhcpClient::find(&dirs),
            Some(DhcpClient::Busybox(bin.join("busybox")))
        );
        fs::write(sbin.join("dhclient"), "").unwrap();
        let c = DhcpClient::find(&dirs).unwrap();
        assert_eq!(c, DhcpClient::Dhclient(sbin.join("dhclient")));
        let cmd = c.command("eth0", Path::new("/run/cairn"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-1",
                "-lf",
                "/run/cairn/dhclient.eth0.leases",
                "-pf",
                "/run/cairn/dhclient.eth0.pid",
                "eth0"
            ]
        );
    }

    #[test]
    fn dns_comes_from_the_last_lease() {
        let t = "lease {\n  interface \"eth0\";\n  option domain-name-servers 10.0.2.3;\n}\n\
                 lease {\n  interface \"eth0\";\n  option domain-name-servers 10.0.2.4, 10.0.2.5;\n}\n";
        assert_eq!(
            lease_dns(t),
            vec![
                "10.0.2.4".parse::<IpAddr>().unwrap(),
                "10.0.2.5".parse().unwrap()
            ]
        );
        assert!(lease_dns("garbage").is_empty());
        assert!(lease_dns("option domain-name-servers x, y;").is_empty());
    }
}
