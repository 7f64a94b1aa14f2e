//! The cursor decoding reads through: every read is checked against what is
//! left, which is what makes decoding total.

use crate::ProtoError;
use bytes::{Buf, Bytes};
use cairn_types::ChunkId;

/// A bounds-checked cursor over a frame body.
pub(super) struct Reader(pub(super) Bytes);

impl Reader {
    pub(super) fn need(&self, n: usize) -> Result<(), ProtoError> {
        if self.0.len() < n {
            Err(ProtoError::Malformed(
                "operation runs past the end of the frame",
            ))
        } else {
            Ok(())
        }
    }
    pub(super) fn u8(&mut self) -> Result<u8, ProtoError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }
    pub(super) fn u16(&mut self) -> Result<u16, ProtoError> {
        self.need(2)?;
        Ok(self.0.get_u16_le())
    }
    pub(super) fn u32(&mut self) -> Result<u32, ProtoError> {
        self.need(4)?;
        Ok(self.0.get_u32_le())
    }
    pub(super) fn u64(&mut self) -> Result<u64, ProtoError> {
        self.need(8)?;
        Ok(self.0.get_u64_le())
    }
    pub(super) fn id(&mut self) -> Result<ChunkId, ProtoError> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.0.copy_to_slice(&mut id);
        Ok(ChunkId(id))
    }
    pub(super) fn bytes(&mut self, n: usize) -> Result<Bytes, ProtoError> {
        self.need(n)?;
        Ok(self.0.split_to(n))
    }
    pub(super) fn string(&mut self) -> Result<String, ProtoError> {
        let n = self.u16()? as usize;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Malformed("string is not UTF-8"))
    }
    pub(super) fn finish(&self) -> Result<(), ProtoError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Malformed(
                "trailing bytes after the last operation",
            ))
        }
    }
}
