//! The config model. Field names are the TOML keys; README.md documents each one.

use crate::ConfigError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

/// A whole `node.toml`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub hostname: String,
    #[serde(default)]
    pub mode: Mode,
    pub s3: S3,
    #[serde(default)]
    pub admin: Admin,
    #[serde(default)]
    pub datapath: Datapath,
    pub cluster: Option<Cluster>,
    #[serde(default)]
    pub drives: Drives,
    #[serde(default)]
    pub hugepages: Hugepages,
    #[serde(default)]
    pub sysctl: BTreeMap<String, SysctlValue>,
    #[serde(default)]
    pub network: Network,
    #[serde(default)]
    pub ssh: Ssh,
}

/// The SSH admin console: off unless `listen` is set (put it on the management
/// network's address). Key-only: `authorized_keys` are OpenSSH public-key lines,
/// each optionally prefixed `role=reader ` or `role=operator ` (admin otherwise).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ssh {
    pub listen: Option<SocketAddr>,
    #[serde(default)]
    pub authorized_keys: Vec<String>,
    /// Lets admin keys run shell command lines in the console (`sh COMMAND`),
    /// each logged. Off by default.
    #[serde(default)]
    pub break_glass: bool,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Single,
    Cluster,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct S3 {
    #[serde(default = "default_s3")]
    pub listen: SocketAddr,
    pub access_key: String,
    pub secret_key: String,
    /// Domains for virtual-hosted-style requests (`bucket.DOMAIN`), e.g.
    /// `["s3.example.com"]`; path style works whatever is set.
    #[serde(default)]
    pub domains: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    #[serde(default = "default_admin")]
    pub listen: SocketAddr,
    /// The admin API over TLS too (the node's certificate; admin client
    /// certificates or tokens): off unless set.
    #[serde(default)]
    pub tls_listen: Option<SocketAddr>,
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            listen: default_admin(),
            tls_listen: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Datapath {
    #[serde(default = "default_datapath")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default = "default_reactors")]
    pub reactors: u32,
}

impl Default for Datapath {
    fn default() -> Self {
        Datapath {
            listen: default_datapath(),
            backend: Backend::default(),
            reactors: default_reactors(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Uring,
    /// Userspace NVMe: nodeos binds the claimed controllers to vfio-pci and passes their
    /// PCI addresses to `datapathd --backend nvme`.
    Nvme,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub internal: SocketAddr,
    /// datapathd's peer listener (mutual TLS with the cluster's certificates).
    #[serde(default = "default_peer_listen")]
    pub peer_listen: SocketAddr,
    /// The peer listener as other nodes reach it; default: the internal address's
    /// host with `peer_listen`'s port.
    pub chunk_advertise: Option<SocketAddr>,
    pub domain: Option<String>,
}

impl Cluster {
    /// Where peers reach this node's chunk service.
    pub fn chunk_advertise(&self) -> SocketAddr {
        self.chunk_advertise
            .unwrap_or_else(|| SocketAddr::new(self.internal.ip(), self.peer_listen.port()))
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Drives {
    #[serde(default)]
    pub all_nvme: bool,
    #[serde(default)]
    pub claim: Vec<DriveMatch>,
    #[serde(default)]
    pub allow_empty: bool,
}

/// One claim rule: a device matches when every given key matches.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriveMatch {
    pub serial: Option<String>,
    pub model: Option<String>,
    pub path: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Hugepages {
    #[serde(default)]
    pub count: u64,
    #[serde(default = "default_hugetlbfs")]
    pub mount: PathBuf,
}

impl Default for Hugepages {
    fn default() -> Self {
        Hugepages {
            count: 0,
            mount: default_hugetlbfs(),
        }
    }
}

/// A sysctl value: TOML strings and integers are both accepted, since operators write both.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SysctlValue {
    Int(i64),
    Text(String),
}

impl fmt::Display for SysctlValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SysctlValue::Int(v) => write!(f, "{v}"),
            SysctlValue::Text(v) => f.write_str(v),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Network {
    #[serde(default)]
    pub dns: Vec<IpAddr>,
    #[serde(default)]
    pub interface: Vec<Interface>,
    #[serde(default)]
    pub route: Vec<Route>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    pub name: Option<String>,
    pub mac: Option<Mac>,
    #[serde(default)]
    pub dhcp: bool,
    #[serde(default)]
    pub addresses: Vec<Cidr>,
    pub mtu: Option<u32>,
    pub bond: Option<Bond>,
    pub vlan: Option<Vlan>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bond {
    pub mode: BondMode,
    pub members: Vec<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum BondMode {
    #[serde(rename = "balance-rr")]
    BalanceRr,
    #[serde(rename = "active-backup")]
    ActiveBackup,
    #[serde(rename = "balance-xor")]
    BalanceXor,
    #[serde(rename = "802.3ad")]
    Lacp,
}

impl BondMode {
    /// The kernel's numeric bonding mode (IFLA_BOND_MODE).
    pub fn kernel_mode(self) -> u8 {
        match self {
            BondMode::BalanceRr => 0,
            BondMode::ActiveBackup => 1,
            BondMode::BalanceXor => 2,
            BondMode::Lacp => 4,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Vlan {
    pub parent: String,
    pub id: u16,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub to: RouteDest,
    pub via: Option<IpAddr>,
    pub dev: Option<String>,
    pub metric: Option<u32>,
}

/// `"default"` or a CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum RouteDest {
    Default,
    Net(Cidr),
}

impl TryFrom<String> for RouteDest {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s == "default" {
            Ok(RouteDest::Default)
        } else {
            Cidr::from_str(&s).map(RouteDest::Net)
        }
    }
}

/// An address with prefix length, `10.0.0.5/24` or `fd00::5/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not ADDRESS/PREFIX (e.g. 10.0.0.5/24)"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("prefix `{p}` is not 0..{max}"))?;
        Ok(Cidr { addr, prefix })
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Mac(pub [u8; 6]);

impl TryFrom<String> for Mac {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a MAC address like 52:54:00:12:34:56");
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut mac = [0u8; 6];
        for (b, p) in mac.iter_mut().zip(parts) {
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        Ok(Mac(mac))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

fn default_s3() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9000))
}
fn default_admin() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9001))
}
fn default_datapath() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7410))
}
fn default_peer_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 7411))
}
fn default_reactors() -> u32 {
    1
}
fn default_hugetlbfs() -> PathBuf {
    PathBuf::from("/dev/hugepages")
}

impl NodeConfig {
    /// Parse and validate TOML. `source_name` appears in every error (a path, or
    /// "kernel command line").
    pub fn parse(text: &str, source_name: &str) -> Result<NodeConfig, ConfigError> {
        let cfg: NodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source_name.to_string(),
            // toml's message names the key and quotes the line; keep it whole, on one line.
            message: e.to_string().trim_end().replace('\n', " | "),
        })?;
        cfg.validate()
            .map_err(|(field, message)| ConfigError::Invalid {
                source_name: source_name.to_string(),
                field,
                message,
            })?;
        Ok(cfg)
    }

    /// The checks serde cannot express. Returns the failing field and why.
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((f.to_string(), m));
        if let Err(m) = check_hostname(&self.hostname) {
            return err("hostname", m);
        }
        let ak = &self.s3.access_key;
        if !(3..=128).contains(&ak.len())
            || !ak
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return err(
                "s3.access_key",
                "must be 3..128 characters of A-Z a-z 0-9 . _ -".into(),
            );
        }
        let sk = &self.s3.secret_key;
        if !(8..=128).contains(&sk.len()) || !sk.chars().all(|c| c.is_ascii_graphic()) {
            return err(
                "s3.secret_key",
                "must be 8..128 printable ASCII characters without spaces".into(),
            );
        }
        for d in &self.s3.domains {
            let ok = d.split('.').all(|p| {
                !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
            if !ok {
                return err(
                    "s3.domains",
                    format!("{d:?} is not a domain name (letters, digits, '-', dots between)"),
                );
            }
        }
        if !(1..=64).contains(&self.datapath.reactors) {
            return err("datapath.reactors", "must be 1..64".into());
        }
        match (self.mode, &self.cluster) {
            (Mode::Cluster, None) => {
                return err(
                    "cluster",
                    "mode = \"cluster\" needs a [cluster] table with `internal`".into(),
                )
            }
            (Mode::Single, Some(_)) => {
                return err(
                    "cluster",
                    "[cluster] is set but mode is \"single\"; set mode = \"cluster\"".into(),
                )
            }
            _ => {}
        }
        if let Some(d) = self.cluster.as_ref().and_then(|c| c.domain.as_ref()) {
            if d.is_empty() {
                return err("cluster.domain", "must not be empty".into());
            }
        }
        if !self.drives.all_nvme && self.drives.claim.is_empty() && !self.drives.allow_empty {
            return err(
                "drives",
                "claims no drive: set all_nvme = true, list drives.claim, or allow_empty = true"
                    .into(),
            );
        }
        for (i, c) in self.drives.claim.iter().enumerate() {
            if c.serial.is_none() && c.model.is_none() && c.path.is_none() {
                return err(
                    &format!("drives.claim[{i}]"),
                    "needs at least one of serial, model, path".into(),
                );
            }
        }
        if !self.hugepages.mount.is_absolute() {
            return err("hugepages.mount", "must be an absolute path".into());
        }
        for key in self.sysctl.keys() {
            let ok = !key.is_empty()
                && !key.contains("..")
                && !key.starts_with('.')
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !ok {
                return err(
                    &format!("sysctl.\"{key}\""),
                    "a sysctl key is dotted words of a-z 0-9 _ - (e.g. net.core.rmem_max)".into(),
                );
            }
        }
        self.validate_network()
    }

    fn validate_network(&self) -> Result<(), (String, String)> {
        let mut names = Vec::new();
        for (i, ifc) in self.network.interface.iter().enumerate() {
            let f = |k: &str| format!("network.interface[{i}]{k}");
            match &ifc.name {
                None if ifc.mac.is_none() => {
                    return Err((f(""), "needs `name` or `mac`".into()));
                }
                Some(n) => {
                    if n.is_empty() || n.len() > 15 || n.contains(['/', ' ', ':']) {
                        return Err((
                            f(".name"),
                            format!("`{n}` is not a Linux interface name (1..15 chars, no / : or space)"),
                        ));
                    }
                    if names.contains(n) {
                        return Err((f(".name"), format!("`{n}` is configured twice")));
                    }
                    names.push(n.clone());
                }
                None => {}
            }
            if let Some(m) = ifc.mtu {
                if !(68..=65535).contains(&m) {
                    return Err((f(".mtu"), format!("{m} is not 68..65535")));
                }
            }
            if ifc.bond.is_some() && ifc.vlan.is_some() {
                return Err((f(""), "cannot be both a bond and a VLAN".into()));
            }
            if (ifc.bond.is_some() || ifc.vlan.is_some()) && ifc.name.is_none() {
                return Err((f(".name"), "a bond or VLAN needs a name".into()));
            }
            if (ifc.bond.is_some() || ifc.vlan.is_some()) && ifc.mac.is_some() {
                return Err((
                    f(".mac"),
                    "matches physical NICs; a bond or VLAN is created by name".into(),
                ));
            }
            if let Some(b) = &ifc.bond {
                if b.members.is_empty() {
                    return Err((f(".bond.members"), "must list at least one link".into()));
                }
            }
            if let Some(v) = &ifc.vlan {
                if !(1..=4094).contains(&v.id) {
                    return Err((f(".vlan.id"), format!("{} is not 1..4094", v.id)));
                }
            }
        }
        for (i, r) in self.network.route.iter().enumerate() {
            if r.via.is_none() && r.dev.is_none() {
                return Err((
                    format!("network.route[{i}]"),
                    "needs `via` (a gateway) or `dev`".into(),
                ));
            }
            if let (RouteDest::Net(n), Some(via)) = (r.to, r.via) {
                if n.addr.is_ipv4() != via.is_ipv4() {
                    return Err((
                        format!("network.route[{i}].via"),
                        "gateway and destination are of different IP families".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn check_hostname(h: &str) -> Result<(), String> {
    if h.is_empty() || h.len() > 253 {
        return Err("must be 1..253 characters".into());
    }
    for label in h.split('.') {
        let ok = (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(format!(
                "`{h}` is not a host name: labels are 1..63 of a-z 0-9 -, not starting or ending with -"
            ));
        }
    }
    Ok(())
}
