//! SPDY/3.1 framing, the part `kubectl port-forward` needs (it speaks SPDY, either over a plain
//! HTTP upgrade or tunnelled in a WebSocket).
//!
//! # What the wire carries
//! Every frame has an 8-byte header. A control frame starts with the bit 0x80 set, the version
//! (3) in the rest of the first 16 bits, then its type; a data frame starts with the stream id
//! (31 bits). Both follow with one byte of flags (0x01 FIN) and a 24-bit length.
//! - SYN_STREAM (1): stream id, associated stream id, priority, slot, then a header block.
//! - SYN_REPLY (2): stream id, then a header block. The client waits for it on each stream it
//!   opens.
//! - RST_STREAM (3): stream id and status. SETTINGS (4), PING (6, echoed), GOAWAY (7),
//!   HEADERS (8), WINDOW_UPDATE (9; the Go client neither sends nor honours flow control, and
//!   nor does this server).
//!
//! Header blocks are compressed with zlib as one stream per direction for the whole connection,
//! each block ending in a sync flush. The client's stream is primed with SPDY/3's dictionary;
//! the server may compress without it (the Go reader takes a dictionary only when the stream
//! header asks for one). Inside, a block is a 32-bit count of pairs, then each name and value
//! with a 32-bit length; names are lower case, and a value holding several values separates
//! them with NUL.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The `FIN` flag of a frame.
pub const FLAG_FIN: u8 = 0x01;

/// A frame, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A new stream from the peer, with its (still compressed) header block.
    SynStream {
        /// The stream id.
        id: u32,
        /// Flags (FIN: the peer sends nothing on it).
        flags: u8,
        /// The compressed header block.
        headers: Vec<u8>,
    },
    /// The peer's answer to a stream we opened.
    SynReply {
        /// The stream id.
        id: u32,
        /// Flags.
        flags: u8,
        /// The compressed header block.
        headers: Vec<u8>,
    },
    /// The peer ends a stream abruptly.
    RstStream {
        /// The stream id.
        id: u32,
        /// Why.
        status: u32,
    },
    /// A ping to echo (or the answer to ours).
    Ping(u32),
    /// The peer ends the connection.
    GoAway,
    /// More headers on a stream (the compressed block must still go through the inflater).
    Headers {
        /// The stream id.
        id: u32,
        /// Flags.
        flags: u8,
        /// The compressed header block.
        headers: Vec<u8>,
    },
    /// Data on a stream.
    Data {
        /// The stream id.
        id: u32,
        /// Flags (FIN: the last of it).
        flags: u8,
        /// The payload.
        data: Vec<u8>,
    },
    /// A control frame with nothing to do here (SETTINGS, WINDOW_UPDATE, ...).
    Other(u16),
}

/// A malformed frame or header block.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A control frame of another SPDY version.
    #[error("SPDY version {0} is not served")]
    Version(u16),
    /// A frame too short for its type.
    #[error("a SPDY frame of type {0} is too short")]
    Short(u16),
    /// A frame larger than this server accepts.
    #[error("a SPDY frame of {0} bytes is too large")]
    TooLarge(usize),
    /// A header block that does not inflate or parse.
    #[error("bad SPDY header block: {0}")]
    Headers(String),
}

/// Frames larger than this end the connection (a header block or data frame is far smaller).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Takes one whole frame off the front of `buf`; `None` while more bytes are needed.
pub fn decode(buf: &mut Vec<u8>) -> Result<Option<Frame>, Error> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let flags = buf[4];
    let length = (u32_at(buf, 4) & 0x00ff_ffff) as usize;
    if length > MAX_FRAME {
        return Err(Error::TooLarge(length));
    }
    if buf.len() < 8 + length {
        return Ok(None);
    }
    let frame: Vec<u8> = buf.drain(..8 + length).collect();
    let body = &frame[8..];
    if frame[0] & 0x80 == 0 {
        return Ok(Some(Frame::Data {
            id: u32_at(&frame, 0) & 0x7fff_ffff,
            flags,
            data: body.to_vec(),
        }));
    }
    let version = u16::from_be_bytes([frame[0], frame[1]]) & 0x7fff;
    let kind = u16::from_be_bytes([frame[2], frame[3]]);
    if version != 3 {
        return Err(Error::Version(version));
    }
    let need = |n: usize| {
        if body.len() < n {
            Err(Error::Short(kind))
        } else {
            Ok(())
        }
    };
    let id = || u32_at(body, 0) & 0x7fff_ffff;
    Ok(Some(match kind {
        1 => {
            need(10)?;
            Frame::SynStream {
                id: id(),
                flags,
                headers: body[10..].to_vec(),
            }
        }
        2 => {
            need(4)?;
            Frame::SynReply {
                id: id(),
                flags,
                headers: body[4..].to_vec(),
            }
        }
        3 => {
            need(8)?;
            Frame::RstStream {
                id: id(),
                status: u32_at(body, 4),
            }
        }
        6 => {
            need(4)?;
            Frame::Ping(u32_at(body, 0))
        }
        7 => Frame::GoAway,
        8 => {
            need(4)?;
            Frame::Headers {
                id: id(),
                flags,
                headers: body[4..].to_vec(),
            }
        }
        other => Frame::Other(other),
    }))
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&(0x8000u16 | 3).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A DATA frame.
pub fn data(id: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A SYN_STREAM frame opening stream `id` (odd for the side that dialled) with an already
/// compressed header block; no associated stream, lowest priority.
pub fn syn_stream(id: u32, flags: u8, headers: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(10 + headers.len());
    body.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    body.extend_from_slice(&0u32.to_be_bytes());
    body.extend_from_slice(&[0, 0]);
    body.extend_from_slice(headers);
    control(1, flags, &body)
}

/// A SYN_REPLY frame carrying an already compressed header block.
pub fn syn_reply(id: u32, flags: u8, headers: &[u8]) -> Vec<u8> {
    let mut body = (id & 0x7fff_ffff).to_be_bytes().to_vec();
    body.extend_from_slice(headers);
    control(2, flags, &body)
}

/// A RST_STREAM frame (`status` 5 is CANCEL, 1 PROTOCOL_ERROR).
pub fn rst_stream(id: u32, status: u32) -> Vec<u8> {
    let mut body = (id & 0x7fff_ffff).to_be_bytes().to_vec();
    body.extend_from_slice(&status.to_be_bytes());
    control(3, 0, &body)
}

/// A PING frame.
pub fn ping(id: u32) -> Vec<u8> {
    control(6, 0, &id.to_be_bytes())
}

/// A GOAWAY frame (status OK).
pub fn go_away(last_good: u32) -> Vec<u8> {
    let mut body = last_good.to_be_bytes().to_vec();
    body.extend_from_slice(&0u32.to_be_bytes());
    control(7, 0, &body)
}

/// The header blocks of one direction of a connection: one zlib stream each way.
pub struct HeaderCodec {
    inflate: Decompress,
    deflate: Compress,
}

impl Default for HeaderCodec {
    fn default() -> Self {
        HeaderCodec {
            inflate: Decompress::new(true),
            deflate: Compress::new(Compression::default(), true),
        }
    }
}

impl HeaderCodec {
    /// Inflates and parses the peer's next header block: its pairs, names in lower case.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, Error> {
        let bad = |e: &dyn std::fmt::Display| Error::Headers(e.to_string());
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut input = block;
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(1024));
            }
            let before_in = self.inflate.total_in();
            let result = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = (self.inflate.total_in() - before_in) as usize;
            input = &input[used..];
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| bad(&e))?;
                    continue;
                }
                Err(e) => return Err(bad(&e)),
            }
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            if out.len() > MAX_FRAME {
                return Err(Error::TooLarge(out.len()));
            }
        }
        parse_block(&out)
    }

    /// Compresses a header block of `pairs` for the peer.
    pub fn encode(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = (pairs.len() as u32).to_be_bytes().to_vec();
        for (name, value) in pairs {
            for part in [name.to_ascii_lowercase(), value.to_string()] {
                raw.extend_from_slice(&(part.len() as u32).to_be_bytes());
                raw.extend_from_slice(part.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = &raw[..];
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .expect("deflating into a growing buffer");
            input = &input[(self.deflate.total_in() - before) as usize..];
            if input.is_empty() && out.len() < out.capacity() && status != Status::BufError {
                break;
            }
        }
        out
    }
}

fn parse_block(raw: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let short = || Error::Headers("truncated header block".into());
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], Error> {
        let piece = raw.get(at..at + n).ok_or_else(short)?;
        at += n;
        Ok(piece)
    };
    let count = u32_at(take(4)?, 0) as usize;
    let mut pairs = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let len = u32_at(take(4)?, 0) as usize;
        let name = String::from_utf8_lossy(take(len)?).to_ascii_lowercase();
        let len = u32_at(take(4)?, 0) as usize;
        let value = String::from_utf8_lossy(take(len)?).into_owned();
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// SPDY/3's header compression dictionary (the protocol's constant, which both ends prime
/// their zlib streams with).
pub const DICTIONARY: &[u8] = include_bytes!("spdy3-dictionary.bin");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_off_a_byte_stream_whole() {
        let mut wire = data(5, FLAG_FIN, b"hello");
        wire.extend(ping(7));
        wire.extend(rst_stream(3, 5));
        wire.extend(go_away(9));
        let mut buf = wire[..6].to_vec();
        assert_eq!(decode(&mut buf), Ok(None));
        buf.extend_from_slice(&wire[6..]);
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Frame::Data {
                id: 5,
                flags: FLAG_FIN,
                data: b"hello".to_vec()
            }))
        );
        assert_eq!(decode(&mut buf), Ok(Some(Frame::Ping(7))));
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Frame::RstStream { id: 3, status: 5 }))
        );
        assert_eq!(decode(&mut buf), Ok(Some(Frame::GoAway)));
        assert!(buf.is_empty());
        // SPDY/2 is refused; a short control frame too.
        let mut v2 = control(1, 0, &[0; 12]);
        v2[1] = 2;
        assert_eq!(decode(&mut v2), Err(Error::Version(2)));
        let mut short = control(3, 0, &[0; 4]);
        assert_eq!(decode(&mut short), Err(Error::Short(3)));
    }

    #[test]
    fn header_blocks_round_trip_through_one_zlib_stream_per_side() {
        let mut ours = HeaderCodec::default();
        let mut theirs = HeaderCodec::default();
        // Two blocks in a row: the second depends on the first's zlib state.
        for port in ["8080", "9090"] {
            let block = ours.encode(&[("streamType", "data"), ("port", port)]);
            let pairs = theirs.decode(&block).unwrap();
            assert_eq!(
                pairs,
                vec![
                    ("streamtype".to_string(), "data".to_string()),
                    ("port".to_string(), port.to_string())
                ]
            );
        }
    }

    #[test]
    fn a_client_stream_primed_with_the_dictionary_inflates() {
        // What a Go client sends: zlib with SPDY's dictionary (FDICT set in its header).
        let mut deflate = Compress::new(Compression::best(), true);
        deflate.set_dictionary(DICTIONARY).unwrap();
        let mut raw = 2u32.to_be_bytes().to_vec();
        for part in ["streamtype", "error", "requestid", "0"] {
            raw.extend_from_slice(&(part.len() as u32).to_be_bytes());
            raw.extend_from_slice(part.as_bytes());
        }
        let mut block = Vec::with_capacity(512);
        deflate
            .compress_vec(&raw, &mut block, FlushCompress::Sync)
            .unwrap();
        assert_eq!(
            block[1] & 0x20,
            0x20,
            "the zlib header asks for a dictionary"
        );
        let pairs = HeaderCodec::default().decode(&block).unwrap();
        assert_eq!(pairs[0], ("streamtype".into(), "error".into()));
        assert_eq!(pairs[1], ("requestid".into(), "0".into()));
        assert!(HeaderCodec::default().decode(b"\x78\x9cgarbage").is_err());
    }
}
