//! Links the system ISA-L (Debian `libisal-dev`), failing the build with an
//! actionable message when it is absent instead of an opaque linker error.

use std::path::Path;
use std::process::Command;

const HINT: &str = "cairn-erasure needs ISA-L: install libisal-dev (apt-get install libisal-dev)";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ISAL_LIB_DIR");

    // An explicit directory wins (cross builds, a locally built newer ISA-L).
    if let Some(dir) = std::env::var_os("ISAL_LIB_DIR") {
        let dir = Path::new(&dir);
        if !dir.join("libisal.so").exists() && !dir.join("libisal.a").exists() {
            panic!(
                "ISAL_LIB_DIR={} holds no libisal.so/libisal.a; {HINT}",
                dir.display()
            );
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=isal");
        return;
    }

    // pkg-config knows the multiarch path; Debian ships libisal.pc.
    let via_pkg_config = Command::new("pkg-config")
        .args(["--exists", "libisal"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if via_pkg_config {
        if let Ok(out) = Command::new("pkg-config")
            .args(["--libs-only-L", "libisal"])
            .output()
        {
            for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                }
            }
        }
        println!("cargo:rustc-link-lib=isal");
        return;
    }

    // No pkg-config binary: fall back to the header the -dev package installs.
    let header_present = ["/usr/include/isa-l.h", "/usr/local/include/isa-l.h"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !header_present {
        panic!("{HINT} (no pkg-config entry `libisal` and no isa-l.h found)");
    }
    println!("cargo:rustc-link-lib=isal");
}
