//! Authorized keys: OpenSSH public-key lines, each optionally prefixed with the
//! role the key's sessions get.

use cairn_adminapi::Role;
use russh::keys::PublicKey;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("unknown role {0:?} (reader, operator or admin)")]
    Role(String),
    #[error("not an OpenSSH public key: {0}")]
    Key(String),
}

/// A key a session may log in with.
#[derive(Clone, Debug)]
pub struct AuthorizedKey {
    pub key: PublicKey,
    pub role: Role,
    /// The key's comment (or its fingerprint when it has none): how sessions
    /// are named in the audit log.
    pub name: String,
}

/// One line: `[role=ROLE] TYPE BASE64 [COMMENT]`; blank lines and `#` comments
/// are `None`.
pub fn parse_line(line: &str) -> Result<Option<AuthorizedKey>, KeyError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (role, rest) = match line.strip_prefix("role=") {
        Some(r) => {
            let (name, rest) = r.split_once(char::is_whitespace).unwrap_or((r, ""));
            let role = Role::parse(name).ok_or_else(|| KeyError::Role(name.to_string()))?;
            (role, rest.trim())
        }
        None => (Role::Admin, line),
    };
    let key = PublicKey::from_openssh(rest).map_err(|e| KeyError::Key(e.to_string()))?;
    let name = match key.comment().as_str_lossy() {
        "" => key.fingerprint(russh::keys::HashAlg::Sha256).to_string(),
        c => c.to_string(),
    };
    Ok(Some(AuthorizedKey { key, role, name }))
}

/// One public key line (`TYPE BASE64 [COMMENT]`, no role) checked: its
/// `SHA256:` fingerprint, and the key as `TYPE BASE64` (the comment dropped).
pub fn check_public_key(line: &str) -> Result<(String, String), KeyError> {
    let key = PublicKey::from_openssh(line.trim()).map_err(|e| KeyError::Key(e.to_string()))?;
    // The console is built without RSA (russh's `rsa` feature): such a key
    // would be listed and never log in.
    if !matches!(
        key.algorithm(),
        russh::keys::Algorithm::Ed25519 | russh::keys::Algorithm::Ecdsa { .. }
    ) {
        return Err(KeyError::Key(format!(
            "{} keys are not taken: use ed25519 (ssh-keygen -t ed25519) or ECDSA",
            key.algorithm()
        )));
    }
    let fingerprint = key.fingerprint(russh::keys::HashAlg::Sha256).to_string();
    let text = key.to_openssh().map_err(|e| KeyError::Key(e.to_string()))?;
    let bare = text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    Ok((fingerprint, bare))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDttbtoFgSZTBX/C80QEY/Q4a+L98mC5HXrSdFhn5687 alice@ops";

    #[test]
    fn lines_with_and_without_a_role() {
        let k = parse_line(KEY).unwrap().unwrap();
        assert_eq!((k.role, k.name.as_str()), (Role::Admin, "alice@ops"));
        let k = parse_line(&format!("role=reader {KEY}")).unwrap().unwrap();
        assert_eq!(k.role, Role::Reader);
        assert!(parse_line("  # a comment").unwrap().is_none());
        assert!(parse_line("").unwrap().is_none());
        assert!(matches!(
            parse_line(&format!("role=root {KEY}")),
            Err(KeyError::Role(_))
        ));
        assert!(matches!(
            parse_line("ssh-ed25519 AAAA-garbage"),
            Err(KeyError::Key(_))
        ));
    }
}
