//! The identifiers every layer of Cairn names things by: a chunk, the tenant that
//! owns it, a drive within a node, and one written version of a chunk.
//!
//! This is a bottom crate with no dependencies: the chunk store, the chunk
//! protocol, and the management plane above them all depend on it, so none of them
//! has to depend on another only to name a chunk. Any Cairn crate may depend on
//! it; it must stay plain values (no I/O, no wire or disk encoding, no
//! dependencies), so that depending on it never pulls in a layer.

use std::fmt;

/// A chunk's identity: 128 bits chosen by the caller (mgmtd derives it from the
/// object version, the stripe and the fragment index).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ChunkId(pub [u8; 16]);

impl ChunkId {
    /// The smallest id; listings start after it.
    pub const MIN: ChunkId = ChunkId([0; 16]);

    /// Builds an id from a 128-bit integer.
    pub fn from_u128(v: u128) -> Self {
        ChunkId(v.to_be_bytes())
    }

    /// The id as a 128-bit integer.
    pub fn as_u128(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

/// Tenant identity travels with every chunk operation; a chunk is visible only to
/// the tenant that wrote it.
pub type TenantId = u64;

/// Index of a drive within one datapathd.
pub type DriveIndex = u16;

/// One written version of a chunk on its drive, as the collector lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkVersion {
    pub id: ChunkId,
    pub tenant: TenantId,
    /// The sequence number of the write that made this chunk on its drive.
    pub seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_id_round_trips_and_orders_as_its_integer() {
        let a = ChunkId::from_u128(1 << 64);
        let b = ChunkId::from_u128((1 << 64) + 1);
        assert_eq!(a.as_u128(), 1 << 64);
        assert!(ChunkId::MIN < a && a < b);
        assert_eq!(a.to_string(), format!("{:032x}", 1u128 << 64));
    }
}
