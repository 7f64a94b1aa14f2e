//! KV pools (`/v1/tenants/{tenant}/kv/pools`, `/v1/kv/stats`): a tenant's named
//! keyspaces for the KV-cache tier, and what each holds on this node.

use serde::{Deserialize, Serialize};

/// A pool to create.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NewKvPool {
    pub name: String,
    /// RESP's `SELECT` number (default: the next free one from 1).
    #[serde(default)]
    pub index: Option<u32>,
    /// Bytes the pool may hold on the drives (none: the tenant's quota bounds it).
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Expiry of a value set without one, in seconds (none: never).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// The most of each node's RAM tier its values take (none: the tier's bound).
    #[serde(default)]
    pub ram: Option<u64>,
    /// When full: evict the oldest values not pinned (a cache, the default) or
    /// refuse writes (`false`: a store).
    #[serde(default = "yes")]
    pub evict: bool,
    /// Set: the pool's keyspace is this new S3 bucket of the tenant, so its values
    /// are objects there too (none: a keyspace S3 cannot name).
    #[serde(default)]
    pub s3_bucket: Option<String>,
    /// The nodes that store the pool's values, by id or unique id prefix as
    /// `cluster status` shows them (empty: any node).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// When a write is acknowledged: `write-back` (the default: once in the
    /// memory of each fragment's node, durable a fraction of a second later)
    /// or `durable` (once on stable media).
    #[serde(default = "write_back")]
    pub durability: String,
}

fn write_back() -> String {
    "write-back".into()
}

fn yes() -> bool {
    true
}

/// A pool, with what it holds (on the drives: the cluster's figures; in RAM and
/// the hit counts: the node answering's).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvPoolView {
    /// The tenant's name (`root` for the root key's).
    pub tenant: String,
    /// `default` for a tenant's database 0.
    pub name: String,
    pub index: u32,
    /// The bucket holding its values (an S3 bucket when `s3` is true).
    pub bucket: String,
    pub s3: bool,
    pub capacity: Option<u64>,
    pub ram_capacity: Option<u64>,
    pub ttl_secs: Option<u64>,
    pub evict: bool,
    /// The nodes storing its values (full ids; empty: any node).
    pub nodes: Vec<String>,
    /// `write-back` or `durable` (see [`NewKvPool::durability`]).
    pub durability: String,
    /// Values and bytes stored (on the drives, before protection).
    pub values: u64,
    pub bytes: u64,
    /// This node's RAM tier: bytes held for the pool, hits and misses of reads
    /// that could use it, values pushed out of RAM.
    pub ram_bytes: u64,
    pub ram_hits: u64,
    pub ram_misses: u64,
    pub ram_evicted: u64,
    /// Values this node deleted from the full pool to make room.
    pub dropped: u64,
    /// Bytes written to and read from the pool through this node since it
    /// started (sample twice for a rate).
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// `GET /v1/kv/stats`: every pool of every tenant, and the node's RAM tier.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvStats {
    /// Bytes the node's RAM tier may hold, and holds.
    pub ram_capacity: u64,
    pub ram_bytes: u64,
    /// Bytes served from RAM, and taken into it, since the node started (sample
    /// twice for a rate).
    pub ram_bytes_out: u64,
    pub ram_bytes_in: u64,
    pub pools: Vec<KvPoolView>,
}
