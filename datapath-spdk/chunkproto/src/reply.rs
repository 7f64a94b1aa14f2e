//! Replies larger than one frame.
//!
//! A batch of gets may ask for more bytes than a frame holds (three 30 MiB chunks,
//! say). Its answer then comes as several response frames with the batch's request
//! id, each carrying the next results in request order; the client knows how many
//! operations it asked for and gathers frames until it has that many results
//! ([`Reassembly`]). Every frame is an ordinary version-1 response frame, so the
//! frame format is unchanged:
//!
//! * a server that predates this never splits (it did not answer such a batch at
//!   all);
//! * a client that predates this takes the first frame for the whole answer, finds
//!   the count short and fails that one call (`Mismatch`), and ignores the rest:
//!   a clear error where it used to wait until its timeout. (datapathd sends a
//!   reply that fits in a frame as one frame, so nothing else changes for it.)
//!
//! A batch's reply is bounded as a whole by [`MAX_BATCH_REPLY`]: the server
//! refuses, by name and before reading them, the gets that would take it past;
//! the client gives up on a reply that runs past it (plus a frame of slack).

use crate::codec::{encode_response_batch, truncate_utf8, HEADER, MAX_TEXT};
use crate::{Frame, ProtoError, Reply, Response, MAX_BATCH_REPLY, MAX_FRAME};
use bytes::Bytes;

/// The exact number of bytes one result adds to a response frame.
pub fn response_len(r: &Response) -> usize {
    match r {
        Ok(Reply::Get { payload }) => 1 + 1 + 4 + payload.len(),
        Ok(Reply::Put) => 2,
        Ok(Reply::Delete { .. }) => 3,
        Ok(Reply::Stat { .. }) => 10,
        Ok(Reply::List { chunks }) => 1 + 1 + 4 + 24 * chunks.len(),
        Ok(Reply::ListVersions { chunks }) => 1 + 1 + 4 + 32 * chunks.len(),
        Ok(Reply::DeleteVersion { .. }) => 3,
        Err(f) => 1 + 2 + truncate_utf8(&f.message, MAX_TEXT).len(),
        // Drive reports: encode and measure.
        other => encode_response_batch(0, std::slice::from_ref(other))
            .map(|parts| parts.iter().map(Bytes::len).sum::<usize>() - 4 - HEADER)
            .unwrap_or(MAX_FRAME),
    }
}

/// Encodes a batch's results as one or more response frames, each within
/// [`MAX_FRAME`] and holding the next results in order (one frame when they fit,
/// and always at least one, so an empty batch is answered too). Fails only for a
/// single result that no frame can hold, which no chunk is.
pub fn encode_response_frames(
    request_id: u64,
    results: &[Response],
) -> Result<Vec<Vec<Bytes>>, ProtoError> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut bytes = HEADER;
    for (i, r) in results.iter().enumerate() {
        let n = response_len(r);
        if HEADER + n > MAX_FRAME {
            return Err(ProtoError::TooLarge(HEADER + n));
        }
        if i > start && bytes + n > MAX_FRAME {
            frames.push(encode_response_batch(request_id, &results[start..i])?);
            start = i;
            bytes = HEADER;
        }
        bytes += n;
    }
    if start < results.len() || frames.is_empty() {
        frames.push(encode_response_batch(request_id, &results[start..])?);
    }
    Ok(frames)
}

/// Gathers the response frames of one batch until it has a result per request.
#[derive(Debug)]
pub struct Reassembly {
    want: usize,
    got: Vec<Response>,
    bytes: usize,
}

impl Reassembly {
    /// For a batch of `want` operations.
    pub fn new(want: usize) -> Reassembly {
        Reassembly {
            want,
            got: Vec::new(),
            bytes: 0,
        }
    }

    /// Adds one response frame's results; `Ok(true)` once every result is in.
    /// A frame that does not decode, an empty frame for an unfinished batch, more
    /// results than were asked for, or a reply past [`MAX_BATCH_REPLY`] is an
    /// error (the call fails; the connection stays usable).
    pub fn push(&mut self, frame: &Frame) -> Result<bool, ProtoError> {
        self.bytes = self.bytes.saturating_add(4 + HEADER + frame.body.len());
        if self.bytes > MAX_BATCH_REPLY + MAX_FRAME {
            return Err(ProtoError::Mismatch("reply larger than any batch may have"));
        }
        let res = frame.responses()?;
        if res.is_empty() && self.got.len() < self.want {
            return Err(ProtoError::Mismatch("empty frame in an unfinished reply"));
        }
        if self.got.len() + res.len() > self.want {
            return Err(ProtoError::Mismatch(
                "result count differs from request count",
            ));
        }
        if self.got.is_empty() {
            self.got.reserve_exact(self.want.min(crate::MAX_OPS));
        }
        self.got.extend(res);
        Ok(self.got.len() == self.want)
    }

    /// The results, in request order.
    pub fn into_results(self) -> Vec<Response> {
        self.got
    }
}

/// For the fuzz targets and their stable stand-in: `data` as the bytes a client
/// reads back for a batch of `want` operations (its first byte). Gathering must
/// end in results, an error, or a want for more bytes; never a panic, never more
/// results than asked for.
#[doc(hidden)]
pub fn fuzz_reassembly(data: &[u8]) {
    let Some((&want, rest)) = data.split_first() else {
        return;
    };
    let mut buf = bytes::BytesMut::from(rest);
    let mut r = Reassembly::new(want as usize);
    while let Ok(Some(f)) = crate::decode_frame(&mut buf) {
        match r.push(&f) {
            Ok(false) => {}
            Ok(true) => {
                assert_eq!(r.into_results().len(), want as usize);
                return;
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_frame, Failure, FailureCode};
    use bytes::BytesMut;

    fn get(len: usize, fill: u8) -> Response {
        Ok(Reply::Get {
            payload: Bytes::from(vec![fill; len]),
        })
    }

    fn reassemble(frames: Vec<Vec<Bytes>>, want: usize) -> Result<Vec<Response>, ProtoError> {
        let mut buf = BytesMut::new();
        for f in frames {
            for p in f {
                buf.extend_from_slice(&p);
            }
        }
        let mut r = Reassembly::new(want);
        while let Some(f) = decode_frame(&mut buf)? {
            assert_eq!(f.request_id, 9);
            if r.push(&f)? {
                assert!(buf.is_empty(), "frames after the last result");
                return Ok(r.into_results());
            }
        }
        Err(ProtoError::Closed)
    }

    #[test]
    fn lengths_are_exact() {
        let samples = vec![
            get(0, 0),
            get(1000, 1),
            Err(Failure::new(FailureCode::NotFound, "gone")),
            Err(Failure::new(FailureCode::Io, "é".repeat(800))),
            Ok(Reply::List { chunks: vec![] }),
            Ok(Reply::Put),
            Ok(Reply::Delete { existed: true }),
            Ok(Reply::Stat { len: 5, crc32c: 6 }),
            Ok(Reply::List {
                chunks: vec![(cairn_types::ChunkId::from_u128(3), 4); 10],
            }),
        ];
        for s in &samples {
            let parts = encode_response_batch(1, std::slice::from_ref(s)).unwrap();
            let total: usize = parts.iter().map(Bytes::len).sum();
            assert_eq!(total, 4 + HEADER + response_len(s), "{s:?}");
        }
    }

    #[test]
    fn a_reply_larger_than_a_frame_is_split_and_gathered() {
        // Three 30 MiB chunks and small results between them: 90 MiB in all.
        let res = vec![
            get(30 << 20, 1),
            Err(Failure::new(FailureCode::NotFound, "no such chunk")),
            get(30 << 20, 2),
            Ok(Reply::Put),
            get(30 << 20, 3),
        ];
        let frames = encode_response_frames(9, &res).unwrap();
        assert_eq!(frames.len(), 2);
        for f in &frames {
            let total: usize = f.iter().map(Bytes::len).sum();
            assert!(total <= MAX_FRAME + 4);
        }
        assert_eq!(reassemble(frames, res.len()).unwrap(), res);
        // One that fits is one frame, and an empty batch is answered too.
        assert_eq!(encode_response_frames(9, &res[..2]).unwrap().len(), 1);
        assert!(reassemble(encode_response_frames(9, &[]).unwrap(), 0)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn reassembly_refuses_what_was_not_asked_for() {
        let res = vec![get(10, 1), get(10, 2)];
        let frames = encode_response_frames(9, &res).unwrap();
        // More results than requests.
        assert!(matches!(
            reassemble(frames.clone(), 1),
            Err(ProtoError::Mismatch(_))
        ));
        // An empty frame while results are still owed.
        let empty = encode_response_batch(9, &[]).unwrap();
        let mut r = Reassembly::new(2);
        let mut b = BytesMut::new();
        for p in empty {
            b.extend_from_slice(&p);
        }
        let f = decode_frame(&mut b).unwrap().unwrap();
        assert!(r.push(&f).is_err());
        // A single result no frame can hold is refused at encoding.
        let huge = vec![get(MAX_FRAME, 0)];
        assert!(matches!(
            encode_response_frames(9, &huge),
            Err(ProtoError::TooLarge(_))
        ));
    }
}
