//! Where fragments go: rendezvous (highest-random-weight) hashing over the drives.
//!
//! Each (extent, stripe) ranks every drive by a hash of the pair and the drive; the
//! stripe's fragments take the best-ranked healthy drives, one each, so no two
//! fragments of a stripe share a failure domain and stripes spread evenly. The
//! chosen drives are recorded in the manifest, so a read never depends on the
//! drive set staying the same; a change of drive set moves only the stripes whose
//! ranking it changes.

use cairn_meta::UNPLACED;

/// A 64-bit mixer (SplitMix64's finaliser): cheap and well distributed.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn score(extent: u128, stripe: u32, drive: u16) -> u64 {
    let a = mix(extent as u64 ^ mix((extent >> 64) as u64));
    mix(a ^ mix(((stripe as u64) << 16) | drive as u64))
}

/// The drives for `width` fragments of one stripe: the best-ranked healthy drives,
/// in rank order, at most one per failure domain (`domains[d]` is drive `d`'s),
/// then `UNPLACED` for positions no healthy domain is left for. Ranking drives
/// (not domains) and skipping a taken domain keeps the spread even over drives
/// within a node and over nodes at once, and a node's loss moves only the stripes
/// that had a fragment there.
pub fn place(
    extent: u128,
    stripe: u32,
    width: usize,
    healthy: &[bool],
    domains: &[u32],
) -> Vec<u16> {
    let mut ranked: Vec<u16> = (0..healthy.len() as u16)
        .filter(|&d| healthy[d as usize])
        .collect();
    ranked.sort_by_key(|&d| std::cmp::Reverse(score(extent, stripe, d)));
    let mut used = Vec::with_capacity(width);
    let mut out = Vec::with_capacity(width);
    for d in ranked {
        if out.len() == width {
            break;
        }
        let dom = domains.get(d as usize).copied().unwrap_or(d as u32);
        if used.contains(&dom) {
            continue;
        }
        used.push(dom);
        out.push(d);
    }
    out.resize(width, UNPLACED);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each drive its own domain.
    fn own(n: u32) -> Vec<u32> {
        (0..n).collect()
    }

    #[test]
    fn one_fragment_per_domain() {
        // Six nodes of four drives: a 4+2 stripe lands on six distinct nodes.
        let healthy = vec![true; 24];
        let domains: Vec<u32> = (0..24).map(|d| d / 4).collect();
        for e in 0..500u128 {
            let p = place(e, 3, 6, &healthy, &domains);
            let mut nodes: Vec<u32> = p.iter().map(|&d| domains[d as usize]).collect();
            nodes.sort();
            nodes.dedup();
            assert_eq!(nodes.len(), 6, "{p:?}");
        }
        // With two nodes out, only four domains are left: two positions unplaced.
        let mut healthy = healthy;
        healthy[..8].fill(false);
        let p = place(9, 0, 6, &healthy, &domains);
        assert_eq!(p.iter().filter(|&&d| d == UNPLACED).count(), 2);
    }

    #[test]
    fn distinct_drives_and_even_spread() {
        let healthy = vec![true; 6];
        let mut load = [0u32; 6];
        for e in 0..2000u128 {
            let p = place(e * 7919, 0, 4, &healthy, &own(6));
            let mut s = p.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 4, "fragments of a stripe on distinct drives");
            for d in p {
                load[d as usize] += 1;
            }
        }
        // 8000 fragments over 6 drives: ~1333 each.
        for l in load {
            assert!((1150..1520).contains(&l), "uneven spread: {load:?}");
        }
    }

    #[test]
    fn failed_drives_are_skipped_and_shortfall_is_unplaced() {
        let healthy = [true, false, true, true];
        let p = place(42, 1, 4, &healthy, &own(4));
        assert!(!p.contains(&1));
        assert_eq!(p[3], UNPLACED);
        assert_eq!(p.iter().filter(|&&d| d == UNPLACED).count(), 1);
    }

    #[test]
    fn stable_when_a_drive_is_added() {
        // Adding a seventh drive moves only stripes that now rank it first.
        let six = vec![true; 6];
        let seven = vec![true; 7];
        let mut moved = 0;
        for e in 0..1000u128 {
            let a = place(e, 0, 1, &six, &own(6));
            let b = place(e, 0, 1, &seven, &own(7));
            if a != b {
                assert_eq!(b[0], 6);
                moved += 1;
            }
        }
        assert!((90..200).contains(&moved), "moved {moved} of 1000");
    }
}
