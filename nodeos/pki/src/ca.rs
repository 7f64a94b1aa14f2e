//! The cluster's certificate authority, node certificates and join tokens.
//!
//! `cluster init` makes a CA (ECDSA P-256, rcgen); its certificate and key travel
//! in the Raft log as [`Secrets`], so whichever node leads can admit a joiner. A
//! joining node makes its own key pair and sends only the public key: the leader
//! signs a certificate for the node's id and advertised addresses, and the private
//! key never leaves the node.
//!
//! A join token is `cairn1.<sha256 of the CA certificate, hex>.<join secret>`. The
//! first part lets the joiner check, before it sends anything, that the seed it
//! dials belongs to that cluster (as kubeadm's discovery hash does); the second
//! proves to the cluster that the operator let the joiner in.

use crate::PkiError;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
    PKCS_ECDSA_P256_SHA256,
};

const TOKEN_PREFIX: &str = "cairn1";

/// The cluster's secrets: they travel in the Raft log, so whichever node leads can
/// admit a joiner.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Secrets {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    /// The secret half of join tokens.
    pub join_secret: String,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

/// What a node's certificate names: its id and the addresses it is reached at.
#[derive(Clone, Copy, Debug)]
pub struct NodeNames<'a> {
    pub id: u64,
    /// Every `host:port` it advertises (internal API, chunk service, S3).
    pub addrs: &'a [&'a str],
}

fn pki_err(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |e| PkiError::Issue {
        what: what.to_string(),
        why: e.to_string(),
    }
}

/// The CA's parameters: rebuilt from the cluster id whenever the CA signs, so only
/// its key needs storing (the issuer name and key identifier follow from these and
/// the key).
fn ca_params(cluster_id: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Cairn");
    dn.push(DnType::CommonName, format!("Cairn cluster {cluster_id} CA"));
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

/// A new CA for `cluster_id`, with a fresh join secret.
pub fn new_ca(cluster_id: &str) -> Result<Secrets, PkiError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(pki_err("CA key"))?;
    let mut params = ca_params(cluster_id);
    params.serial_number = Some(SerialNumber::from_slice(&rand::random::<[u8; 16]>()));
    let cert = params
        .self_signed(&key)
        .map_err(pki_err("CA certificate"))?;
    Ok(Secrets {
        ca_cert_pem: cert.pem(),
        ca_key_pem: key.serialize_pem(),
        join_secret: hex(&rand::random::<[u8; 32]>()),
    })
}

/// A node's own key pair, made on the node.
#[derive(Debug)]
pub struct NodeKey(KeyPair);

impl NodeKey {
    pub fn generate() -> Result<NodeKey, PkiError> {
        KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map(NodeKey)
            .map_err(pki_err("node key"))
    }

    /// The public key to send with a join request (uncompressed P-256 point, hex).
    pub fn public_hex(&self) -> String {
        hex(self.0.public_key_raw())
    }

    /// The private key, PEM (PKCS#8), for the node's TLS directory only.
    pub fn private_pem(&self) -> String {
        self.0.serialize_pem()
    }
}

/// A P-256 public key received from a joiner.
struct RawP256(Vec<u8>);

impl PublicKeyData for RawP256 {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

/// The DNS name in a node's certificate: its id, under the cluster.
pub fn node_dns_name(cluster_id: &str, node: u64) -> String {
    format!("n{node:016x}.{}.cairn", dns_label(cluster_id))
}

fn dns_label(s: &str) -> String {
    let l: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let l = l.trim_matches('-').to_string();
    if l.is_empty() {
        "cluster".into()
    } else {
        l
    }
}

/// The public key a certificate is for (checked: an uncompressed P-256 point),
/// and the CA that signs it.
fn signing(
    secrets: &Secrets,
    cluster_id: &str,
    public_key_hex: &str,
) -> Result<(RawP256, Issuer<'static, KeyPair>), PkiError> {
    let raw = unhex(public_key_hex)
        .filter(|k| k.len() == 65 && k[0] == 4)
        .ok_or(PkiError::BadPublicKey)?;
    let ca_key = KeyPair::from_pem(&secrets.ca_key_pem).map_err(pki_err("CA key"))?;
    Ok((RawP256(raw), Issuer::new(ca_params(cluster_id), ca_key)))
}

/// A leaf certificate's common parameters: the name, a random serial, a
/// signing key, the CA's key identifier.
fn leaf(common_name: String) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Cairn");
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.serial_number = Some(SerialNumber::from_slice(&rand::random::<[u8; 16]>()));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params
}

/// Signs a certificate for `node` over `public_key_hex` (from [`NodeKey::public_hex`]).
/// Its names are the node's id and the hosts of every address it advertises, so
/// peers dialling any of them can check they reached that node's cluster.
pub fn issue(
    secrets: &Secrets,
    cluster_id: &str,
    node: NodeNames<'_>,
    public_key_hex: &str,
) -> Result<String, PkiError> {
    let (raw, issuer) = signing(secrets, cluster_id, public_key_hex)?;
    let mut params = leaf(format!("node {:016x}", node.id));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let mut names = vec![SanType::DnsName(
        node_dns_name(cluster_id, node.id)
            .try_into()
            .map_err(pki_err("node name"))?,
    )];
    for &addr in node.addrs {
        let host = host_of(addr);
        let san = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.to_string().try_into().map_err(pki_err(addr))?),
        };
        if !names.contains(&san) {
            names.push(san);
        }
    }
    params.subject_alt_names = names;
    let cert = params
        .signed_by(&raw, &issuer)
        .map_err(pki_err("node certificate"))?;
    Ok(cert.pem())
}

/// Signs a client certificate for an operator (the admin API's mutual TLS) over
/// `public_key_hex`: named `admin NAME`, client authentication only, valid for
/// `days`. What it may do is not in it: the cluster keeps the certificate's
/// fingerprint with a role, and forgets it to revoke it.
pub fn issue_admin(
    secrets: &Secrets,
    cluster_id: &str,
    name: &str,
    days: u32,
    public_key_hex: &str,
) -> Result<String, PkiError> {
    let (raw, issuer) = signing(secrets, cluster_id, public_key_hex)?;
    let mut params = leaf(format!("admin {name}"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(i64::from(days.max(1)));
    let cert = params
        .signed_by(&raw, &issuer)
        .map_err(pki_err("admin certificate"))?;
    Ok(cert.pem())
}

/// The host of `host:port` (brackets of an IPv6 address removed).
pub(crate) fn host_of(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    }
}

/// SHA-256 of the CA certificate in `secrets`.
fn ca_fingerprint(secrets: &Secrets) -> Result<[u8; 32], PkiError> {
    crate::tls::pem_cert_sha256(&secrets.ca_cert_pem, "CA certificate")
}

/// SHA-256 (hex) of a PEM certificate, as the map records it.
pub fn fingerprint(cert_pem: &str) -> Result<String, PkiError> {
    Ok(hex(&crate::tls::pem_cert_sha256(cert_pem, "certificate")?))
}

/// The join token of the cluster.
pub fn token(secrets: &Secrets) -> Result<String, PkiError> {
    Ok(format!(
        "{TOKEN_PREFIX}.{}.{}",
        hex(&ca_fingerprint(secrets)?),
        secrets.join_secret
    ))
}

/// A token's parts: the CA fingerprint and the secret.
pub fn parse_token(token: &str) -> Result<([u8; 32], &str), PkiError> {
    let bad = || PkiError::MalformedToken;
    let mut parts = token.trim().splitn(3, '.');
    let (Some(TOKEN_PREFIX), Some(fp), Some(secret)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let fp: [u8; 32] = unhex(fp).and_then(|v| v.try_into().ok()).ok_or_else(bad)?;
    if secret.is_empty() {
        return Err(bad());
    }
    Ok((fp, secret))
}

/// Checks a presented token in constant time (in the secret's length).
pub fn check_token(secrets: &Secrets, token: &str) -> Result<(), PkiError> {
    let (fp, secret) = parse_token(token)?;
    let (a, b) = (secrets.join_secret.as_bytes(), secret.as_bytes());
    let same_secret =
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
    if same_secret && fp == ca_fingerprint(secrets)? {
        Ok(())
    } else {
        Err(PkiError::WrongToken)
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of lower- or upper-case hex `s`; `None` for anything else.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::NodeTls;

    fn names<'a>(id: u64, addrs: &'a [&'a str]) -> NodeNames<'a> {
        NodeNames { id, addrs }
    }

    #[test]
    fn issued_certificates_make_working_tls_identities() {
        let s = new_ca("c1").unwrap();
        let key = NodeKey::generate().unwrap();
        let cert = issue(
            &s,
            "c1",
            names(7, &["10.0.0.7:9002", "10.0.0.7:7410"]),
            &key.public_hex(),
        )
        .unwrap();
        let tls = NodeTls::from_pem(&s.ca_cert_pem, &cert, &key.private_pem()).unwrap();
        tls.client_config().unwrap();
        // A key that is not the certified one is refused up front.
        let other = NodeKey::generate().unwrap();
        assert!(NodeTls::from_pem(&s.ca_cert_pem, &cert, &other.private_pem()).is_err());
    }

    #[test]
    fn tokens_name_the_ca_and_carry_the_secret() {
        let s = new_ca("c1").unwrap();
        let t = token(&s).unwrap();
        check_token(&s, &t).unwrap();
        let (fp, _) = parse_token(&t).unwrap();
        assert_eq!(fp, ca_fingerprint(&s).unwrap());
        // Another cluster's token, a changed secret, garbage: refused.
        let other = new_ca("c2").unwrap();
        assert!(check_token(&s, &token(&other).unwrap()).is_err());
        let mut wrong = t.clone();
        wrong.pop();
        wrong.push(if t.ends_with('0') { '1' } else { '0' });
        assert!(check_token(&s, &wrong).is_err());
        for bad in [
            "",
            "cairn1",
            "cairn1.zz.x",
            "cairn2.00.x",
            &t[..t.len() - 65],
        ] {
            assert!(check_token(&s, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn garbage_public_keys_are_refused() {
        let s = new_ca("c1").unwrap();
        for k in ["", "04", "zz", &"00".repeat(65)] {
            assert!(issue(&s, "c1", names(1, &["10.0.0.1:9002"]), k).is_err());
        }
    }
}
