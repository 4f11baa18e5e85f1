//! The protobuf wire format: a bounds-checked reader of (field number, value) pairs.

use super::{Error, Result};

/// One field value as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

impl Value<'_> {
    /// The wire type number, for error messages.
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Bytes(_) => 2,
            Value::Fixed32(_) => 5,
        }
    }
}

/// Reads the fields of one message in order.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The message being read, for error messages.
    message: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over the encoded fields of `message`.
    pub(crate) fn new(buf: &'a [u8], message: &'static str) -> Self {
        Self {
            buf,
            pos: 0,
            message,
        }
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// A base-128 varint (at most 10 bytes).
    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(Error::Truncated {
                    message: self.message,
                });
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(Error::VarintOverflow {
                    message: self.message,
                });
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::VarintOverflow {
            message: self.message,
        })
    }

    /// A little-endian 64-bit value (packed doubles).
    pub(crate) fn fixed64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("took 8 bytes"),
        ))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or(Error::Truncated {
                message: self.message,
            })?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next field, or `None` at the end of the message.
    pub(crate) fn field(&mut self) -> Result<Option<(u32, Value<'a>)>> {
        if self.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(Error::InvalidFieldNumber {
                message: self.message,
                number,
            });
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(self.fixed64()?),
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| Error::Truncated {
                    message: self.message,
                })?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().expect("took 4 bytes"),
            )),
            other => {
                return Err(Error::UnsupportedWireType {
                    message: self.message,
                    tag: number as u32,
                    wire_type: other as u8,
                });
            }
        };
        Ok(Some((number as u32, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_varints_of_every_length() {
        let mut r = Reader::new(&[0x00, 0x7f, 0x80, 0x01, 0xac, 0x02], "t");
        assert_eq!(r.varint().unwrap(), 0);
        assert_eq!(r.varint().unwrap(), 127);
        assert_eq!(r.varint().unwrap(), 128);
        assert_eq!(r.varint().unwrap(), 300);
        assert!(r.is_empty());
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max, "t").varint().unwrap(), u64::MAX);
    }

    #[test]
    fn rejects_overlong_and_truncated_varints() {
        let too_big = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(matches!(
            Reader::new(&too_big, "t").varint(),
            Err(Error::VarintOverflow { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x80, 0x80], "t").varint(),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn reads_each_wire_type() {
        let buf = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 0x02, b'h', b'i', // 3: bytes "hi"
            0x25, 7, 0, 0, 0, // 4: fixed32 7
        ];
        let mut r = Reader::new(&buf, "t");
        assert_eq!(r.field().unwrap(), Some((1, Value::Varint(150))));
        assert_eq!(r.field().unwrap(), Some((2, Value::Fixed64(1))));
        assert_eq!(r.field().unwrap(), Some((3, Value::Bytes(b"hi"))));
        assert_eq!(r.field().unwrap(), Some((4, Value::Fixed32(7))));
        assert_eq!(r.field().unwrap(), None);
    }

    #[test]
    fn rejects_groups_field_zero_and_short_payloads() {
        assert!(matches!(
            Reader::new(&[0x0b], "t").field(),
            Err(Error::UnsupportedWireType { wire_type: 3, .. })
        ));
        assert!(matches!(
            Reader::new(&[0x00, 0x00], "t").field(),
            Err(Error::InvalidFieldNumber { number: 0, .. })
        ));
        assert!(matches!(
            Reader::new(&[0x0a, 0x05, b'a'], "t").field(),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x09, 1, 2], "t").field(),
            Err(Error::Truncated { .. })
        ));
        let huge_len = [
            0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(matches!(
            Reader::new(&huge_len, "t").field(),
            Err(Error::Truncated { .. })
        ));
    }
}
