use super::*;

#[test]
fn fragments_round_trip_and_bind_to_their_place() {
    let tk = TenantKey::generate().unwrap();
    let (dk, wrapped) = tk.new_data_key(7, 42).unwrap();
    let plain: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut buf = plain.clone();
    let tag = dk.seal(3, 1, &mut buf);
    assert_ne!(buf, plain, "sealed bytes are not the plaintext");
    // The manifest's wrapped copy opens to the same key.
    let dk2 = tk.open_data_key(7, 42, &wrapped).unwrap();
    let mut c = buf.clone();
    dk2.open(3, 1, &mut c, &tag).unwrap();
    assert_eq!(c, plain);
    // Another place, another extent or tenant, a flipped byte: refused.
    for (stripe, frag) in [(3, 2), (4, 1)] {
        let mut c = buf.clone();
        assert!(dk2.open(stripe, frag, &mut c, &tag).is_err());
    }
    assert!(tk.open_data_key(8, 42, &wrapped).is_err());
    assert!(tk.open_data_key(7, 43, &wrapped).is_err());
    let mut c = buf.clone();
    c[500] ^= 1;
    assert!(dk2.open(3, 1, &mut c, &tag).is_err());
}

#[test]
fn data_keys_differ_per_extent_and_need_their_tenant_key() {
    let tk = TenantKey::generate().unwrap();
    let other = TenantKey::generate().unwrap();
    let (a, wa) = tk.new_data_key(1, 1).unwrap();
    let (b, _) = tk.new_data_key(1, 1).unwrap();
    let (mut x, mut y) = (vec![0u8; 64], vec![0u8; 64]);
    a.seal(0, 0, &mut x);
    b.seal(0, 0, &mut y);
    assert_ne!(x, y, "each extent has its own key");
    assert!(matches!(
        other.open_data_key(1, 1, &wa),
        Err(EnvelopeError::Unwrap { .. })
    ));
    assert!(matches!(
        tk.open_data_key(1, 1, &wa[1..]),
        Err(EnvelopeError::WrappedLength(_))
    ));
}

#[test]
fn master_key_file_is_private_and_never_overwritten() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    assert!(matches!(
        MasterKey::load(&path),
        Err(EnvelopeError::MasterKey { .. })
    ));
    let m = MasterKey::generate().unwrap();
    m.store(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let loaded = MasterKey::load(&path).unwrap();
    assert_eq!(loaded.fingerprint(), m.fingerprint());
    // Storing the same key again is fine; another key is refused, file unchanged.
    m.store(&path).unwrap();
    let other = MasterKey::generate().unwrap();
    assert!(matches!(
        other.store(&path),
        Err(EnvelopeError::MasterKeyExists { .. })
    ));
    assert_eq!(
        MasterKey::load(&path).unwrap().fingerprint(),
        m.fingerprint()
    );
    // A tenant key wrapped by one master key opens only with it, for its tenant.
    let tk = TenantKey::generate().unwrap();
    let w = m.wrap_tenant_key(5, &tk).unwrap();
    assert!(loaded.unwrap_tenant_key(5, &w).is_ok());
    assert!(loaded.unwrap_tenant_key(6, &w).is_err());
    assert!(other.unwrap_tenant_key(5, &w).is_err());
    // Readable by others, or not a key: refused with the reason.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = MasterKey::load(&path).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not hex").unwrap();
    assert!(MasterKey::load(&path).is_err());
    assert!(MasterKey::from_hex(&m.to_hex()).is_some());
    // Secrets: bound to their name, opened only by their master key.
    let w = m.wrap_secret("CKEY1", b"the secret").unwrap();
    assert_eq!(&m.unwrap_secret("CKEY1", &w).unwrap()[..], b"the secret");
    assert!(m.unwrap_secret("CKEY2", &w).is_err());
    assert!(other.unwrap_secret("CKEY1", &w).is_err());
    assert!(m.unwrap_secret("CKEY1", &w[..10]).is_err());
}
