//! Where fragments go: rendezvous (highest-random-weight) hashing over the drives.
//!
//! Each (extent, stripe) ranks every drive by a hash of the pair and the drive; the
//! stripe's fragments take the best-ranked healthy drives, one each, so no two
//! fragments of a stripe share a failure domain and stripes spread evenly. The
//! chosen drives are recorded in the manifest, so a read never depends on the
//! drive set staying the same; a change of drive set moves only the stripes whose
//! ranking it changes.

use cairn_meta::{BucketRecord, KvDurability, UNPLACED};

/// A 64-bit mixer (SplitMix64's finaliser): cheap and well distributed.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash(extent: u128, stripe: u32, drive: u16) -> u64 {
    let a = mix(extent as u64 ^ mix((extent >> 64) as u64));
    mix(a ^ mix(((stripe as u64) << 16) | drive as u64))
}

/// Weighted rendezvous score (higher ranks first): `w / -ln(u)` with `u` uniform in
/// (0, 1] from the hash. Each drive then wins a share of stripes proportional to its
/// weight, and a weight change moves only the stripes whose winner changes.
fn score(extent: u128, stripe: u32, drive: u16, weight: u32) -> f64 {
    let u = ((hash(extent, stripe, drive) >> 11) + 1) as f64 / (1u64 << 53) as f64;
    weight.max(1) as f64 / -u.ln().min(-f64::MIN_POSITIVE)
}

/// The drives placement may choose from, indexed by cluster-wide drive id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    /// May take new data (exists, healthy, node up and not draining).
    pub ok: Vec<bool>,
    /// Failure domain of each drive: no two fragments of a stripe share one.
    pub domains: Vec<u32>,
    /// Relative share of new data (capacity in GiB by default).
    pub weights: Vec<u32>,
}

impl Candidates {
    /// `n` drives, each its own domain, equal weights.
    pub fn uniform(n: usize) -> Candidates {
        Candidates {
            ok: vec![true; n],
            domains: (0..n as u32).collect(),
            weights: vec![1; n],
        }
    }

    fn domain(&self, d: u16) -> u32 {
        self.domains.get(d as usize).copied().unwrap_or(d as u32)
    }

    /// Keeps only the drives of `nodes`, given each drive's node. Returns the
    /// drives of those nodes, whether or not they may take data now.
    pub fn restrict(&mut self, nodes: &[u64], node_of: impl Fn(u16) -> Option<u64>) -> Vec<u16> {
        let mut theirs = Vec::new();
        for (d, ok) in self.ok.iter_mut().enumerate() {
            let on = node_of(d as u16).is_some_and(|n| nodes.contains(&n));
            *ok &= on;
            if on {
                theirs.push(d as u16);
            }
        }
        theirs
    }

    /// Distinct failure domains of `drives`.
    pub fn domains_of(&self, drives: &[u16]) -> usize {
        let mut doms: Vec<u32> = drives.iter().map(|&d| self.domain(d)).collect();
        doms.sort_unstable();
        doms.dedup();
        doms.len()
    }

    /// Makes each drive its own failure domain (data held on one node).
    pub fn by_drive(&mut self) {
        self.domains = (0..self.ok.len() as u32).collect();
    }
}

/// The stripe shape (k data, m parity fragments) for data kept on `domains`
/// failure domains when the cluster's is `k`+`m`: unchanged when there are
/// enough; otherwise as much of the parity as fits beside at least one data
/// fragment, then as many data fragments as are left (two domains: 1+1, a
/// mirror). So a bucket held on fewer nodes than a stripe is wide still
/// survives the loss of one of them, instead of being written short.
pub fn fit(k: u8, m: u8, domains: usize) -> (u8, u8) {
    let d = domains.min(255) as u8;
    if d as usize >= k as usize + m as usize || d < 2 {
        return (k, m);
    }
    let m2 = m.min(d - 1);
    (k.min(d - m2), m2)
}

/// Where and how a bucket's new data lands: a KV pool's placement and
/// durability; the default (any node, durable before acknowledged) otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Landing {
    /// The nodes its fragments may go to (empty: any). Repair keeps to them.
    pub nodes: Vec<u64>,
    /// Write-back: a write is acknowledged once every fragment is in its drive's
    /// volatile memory on its node, and made durable within `LAZY_FLUSH` after.
    pub write_back: bool,
}

impl Landing {
    pub fn of(bucket: &BucketRecord) -> Landing {
        match &bucket.kv {
            Some(kv) => Landing {
                nodes: kv.nodes.clone(),
                write_back: kv.durability == KvDurability::WriteBack,
            },
            None => Landing::default(),
        }
    }
}

/// The drives for `width` fragments of one stripe: the best-ranked candidate
/// drives, in rank order, at most one per failure domain, then `UNPLACED` for
/// positions no candidate domain is left for. Ranking drives (not domains) and
/// skipping a taken domain keeps the spread even over drives within a node and over
/// nodes at once, and a node's loss moves only the stripes that had a fragment
/// there.
pub fn place(extent: u128, stripe: u32, width: usize, c: &Candidates) -> Vec<u16> {
    let mut ranked: Vec<(f64, u16)> = (0..c.ok.len() as u16)
        .filter(|&d| c.ok[d as usize])
        .map(|d| {
            let w = c.weights.get(d as usize).copied().unwrap_or(1);
            (score(extent, stripe, d, w), d)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut used = Vec::with_capacity(width);
    let mut out = Vec::with_capacity(width);
    for (_, d) in ranked {
        if out.len() == width {
            break;
        }
        let dom = c.domain(d);
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

    fn healthy(ok: &[bool]) -> Candidates {
        Candidates {
            ok: ok.to_vec(),
            ..Candidates::uniform(ok.len())
        }
    }

    #[test]
    fn stripes_fit_the_domains_they_are_kept_on() {
        assert_eq!(fit(4, 2, 6), (4, 2));
        assert_eq!(fit(4, 2, 9), (4, 2));
        assert_eq!(fit(4, 2, 5), (3, 2));
        assert_eq!(fit(4, 2, 3), (1, 2));
        assert_eq!(fit(2, 1, 2), (1, 1));
        assert_eq!(fit(4, 0, 2), (2, 0));
        // One domain: nothing fits better; the caller spreads over drives.
        assert_eq!(fit(2, 1, 1), (2, 1));
    }

    /// Distinct failure domains among the drives that may take data.
    fn open_domains(c: &Candidates) -> usize {
        let open: Vec<u16> = (0..c.ok.len() as u16)
            .filter(|&d| c.ok[d as usize])
            .collect();
        c.domains_of(&open)
    }

    #[test]
    fn restricted_to_nodes() {
        // Four nodes of two drives; a bucket held on nodes 1 and 2.
        let node_of = |d: u16| Some(d as u64 / 2);
        let mut c = Candidates::uniform(8);
        c.domains = (0..8).map(|d| d / 2).collect();
        let mut two = c.clone();
        assert_eq!(two.restrict(&[1, 2], node_of), vec![2, 3, 4, 5]);
        assert_eq!(open_domains(&two), 2);
        two.ok[2] = false;
        two.ok[3] = false;
        assert_eq!(open_domains(&two), 1, "node 1 down");
        assert_eq!(two.domains_of(&[2, 3, 4, 5]), 2, "still its two nodes");
        two.ok[2] = true;
        two.ok[3] = true;
        for e in 0..200u128 {
            let p = place(e, 0, 2, &two);
            let mut nodes: Vec<u64> = p.iter().map(|&d| node_of(d).unwrap()).collect();
            nodes.sort();
            assert_eq!(nodes, vec![1, 2], "one fragment per node: {p:?}");
        }
        // One node: its drives become the domains.
        let mut one = c.clone();
        one.restrict(&[3], node_of);
        assert_eq!(open_domains(&one), 1);
        one.by_drive();
        assert_eq!(open_domains(&one), 2);
        let p = place(5, 0, 2, &one);
        assert!(p.contains(&6) && p.contains(&7), "{p:?}");
        // Wide enough: nodes stay the domains.
        c.restrict(&[0, 1, 3], node_of);
        for e in 0..200u128 {
            let p = place(e, 0, 3, &c);
            let mut nodes: Vec<u64> = p.iter().map(|&d| node_of(d).unwrap()).collect();
            nodes.sort();
            assert_eq!(nodes, vec![0, 1, 3], "{p:?}");
        }
    }

    #[test]
    fn one_fragment_per_domain() {
        // Six nodes of four drives: a 4+2 stripe lands on six distinct nodes.
        let mut c = Candidates::uniform(24);
        c.domains = (0..24).map(|d| d / 4).collect();
        for e in 0..500u128 {
            let p = place(e, 3, 6, &c);
            let mut nodes: Vec<u32> = p.iter().map(|&d| c.domains[d as usize]).collect();
            nodes.sort();
            nodes.dedup();
            assert_eq!(nodes.len(), 6, "{p:?}");
        }
        // With two nodes out, only four domains are left: two positions unplaced.
        c.ok[..8].fill(false);
        let p = place(9, 0, 6, &c);
        assert_eq!(p.iter().filter(|&&d| d == UNPLACED).count(), 2);
    }

    #[test]
    fn distinct_drives_and_even_spread() {
        let c = Candidates::uniform(6);
        let mut load = [0u32; 6];
        for e in 0..2000u128 {
            let p = place(e * 7919, 0, 4, &c);
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
        let p = place(42, 1, 4, &healthy(&[true, false, true, true]));
        assert!(!p.contains(&1));
        assert_eq!(p[3], UNPLACED);
        assert_eq!(p.iter().filter(|&&d| d == UNPLACED).count(), 1);
    }

    #[test]
    fn stable_when_a_drive_is_added() {
        // Adding a seventh drive moves only stripes that now rank it first.
        let (six, seven) = (Candidates::uniform(6), Candidates::uniform(7));
        let mut moved = 0;
        for e in 0..1000u128 {
            let a = place(e, 0, 1, &six);
            let b = place(e, 0, 1, &seven);
            if a != b {
                assert_eq!(b[0], 6);
                moved += 1;
            }
        }
        assert!((90..200).contains(&moved), "moved {moved} of 1000");
    }

    #[test]
    fn shares_follow_weights() {
        // One drive twice the size of the other three: twice their share of
        // single-fragment placements (stripes of one fragment isolate the ranking
        // from the one-per-domain rule).
        let mut c = Candidates::uniform(4);
        c.weights = vec![2, 1, 1, 1];
        let mut load = [0u32; 4];
        for e in 0..10_000u128 {
            load[place(e, 0, 1, &c)[0] as usize] += 1;
        }
        // Expected 4000 / 2000 / 2000 / 2000.
        assert!((3700..4300).contains(&load[0]), "{load:?}");
        for l in &load[1..] {
            assert!((1800..2200).contains(l), "{load:?}");
        }
        // Raising one weight moves stripes only towards that drive.
        let mut heavier = c.clone();
        heavier.weights[3] = 3;
        for e in 0..2000u128 {
            let (a, b) = (place(e, 0, 1, &c)[0], place(e, 0, 1, &heavier)[0]);
            assert!(a == b || b == 3, "stripe {e} moved from {a} to {b}");
        }
    }
}
