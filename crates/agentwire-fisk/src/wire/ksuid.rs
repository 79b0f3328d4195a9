//! KSUID message ids: 27 base62 characters over a 4-byte timestamp and 16 random bytes, as fisk-ai mints.
//!
//! A KSUID (segmentio's K-Sortable Unique IDentifier) is 20 bytes: seconds since [`KSUID_EPOCH`] as a
//! big-endian `u32`, then a 16-byte random payload. Its text form is that 160-bit number in base62
//! (`0-9A-Za-z`), zero-padded to 27 characters, so ids sort by time as strings. The time and the payload
//! are the caller's: this module reads no clock and draws no randomness.
//!
//! Written here rather than taken from a crate, for a measured reason: the maintained Rust KSUID crate
//! (`svix-ksuid` 0.8.0, checked 2026-12-07) parses leniently where a peer's id must be checked. Its
//! `from_str` took `aWgEPTl1tmebfsQzFP4bxwgy80W` (one past the largest KSUID) as the zero KSUID, and took
//! 26- and 28-character strings as KSUIDs; it also reads the clock and the random source itself. This module
//! refuses all three (tests below) and is about 100 lines.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// The KSUID epoch, 2014-05-13T16:53:20Z in Unix seconds: a `u32` of seconds after it lasts past 2150.
pub const KSUID_EPOCH: u64 = 1_400_000_000;

/// Characters of the text form: 62^27 > 2^160 > 62^26.
const TEXT_LEN: usize = 27;
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A KSUID. Ordered as its bytes are, which is by time first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ksuid([u8; 20]);

impl Ksuid {
    /// A KSUID from its two parts: seconds since [`KSUID_EPOCH`] and the random payload.
    pub fn from_parts(timestamp: u32, payload: [u8; 16]) -> Ksuid {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&timestamp.to_be_bytes());
        b[4..].copy_from_slice(&payload);
        Ksuid(b)
    }

    /// A KSUID minted at `now` with `payload` (16 bytes from a CSPRNG). A clock before the epoch gives
    /// timestamp 0 and one past the `u32` range its last second: ids still mint, merely mis-sorted.
    pub fn new(now: SystemTime, payload: [u8; 16]) -> Ksuid {
        let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let ts = u32::try_from(secs.saturating_sub(KSUID_EPOCH)).unwrap_or(u32::MAX);
        Ksuid::from_parts(ts, payload)
    }

    /// Seconds since [`KSUID_EPOCH`].
    pub fn timestamp(&self) -> u32 {
        u32::from_be_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// The random payload.
    pub fn payload(&self) -> [u8; 16] {
        let mut p = [0u8; 16];
        p.copy_from_slice(&self.0[4..]);
        p
    }

    /// The 20 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }
}

/// The 160-bit number as five big-endian 32-bit words.
fn words(bytes: &[u8; 20]) -> [u32; 5] {
    let mut w = [0u32; 5];
    for (i, word) in w.iter_mut().enumerate() {
        let at = i * 4;
        *word = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    }
    w
}

impl fmt::Display for Ksuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut n = words(&self.0);
        let mut out = [b'0'; TEXT_LEN];
        // Long division by 62, least significant digit first, filling from the right.
        for slot in out.iter_mut().rev() {
            let mut rem = 0u64;
            for w in n.iter_mut() {
                let cur = (rem << 32) | u64::from(*w);
                *w = (cur / 62) as u32;
                rem = cur % 62;
            }
            *slot = ALPHABET[rem as usize];
        }
        // Every byte came from ALPHABET, so this is ASCII.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// A string that is not a KSUID's text form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a KSUID: expected 27 base62 characters no greater than aWgEPTl1tmebfsQzFP4bxwgy80V")]
pub struct NotAKsuid;

impl FromStr for Ksuid {
    type Err = NotAKsuid;

    fn from_str(s: &str) -> Result<Ksuid, NotAKsuid> {
        if s.len() != TEXT_LEN {
            return Err(NotAKsuid);
        }
        let mut n = [0u32; 5];
        for c in s.bytes() {
            let digit = ALPHABET.iter().position(|&a| a == c).ok_or(NotAKsuid)? as u64;
            // n = n * 62 + digit, from the least significant word up.
            let mut carry = digit;
            for w in n.iter_mut().rev() {
                let cur = u64::from(*w) * 62 + carry;
                *w = cur as u32;
                carry = cur >> 32;
            }
            if carry != 0 {
                return Err(NotAKsuid);
            }
        }
        let mut b = [0u8; 20];
        for (i, w) in n.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        Ok(Ksuid(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn hex16(s: &str) -> [u8; 16] {
        let mut p = [0u8; 16];
        for (i, b) in p.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).unwrap();
        }
        p
    }

    #[test]
    fn matches_the_reference_implementation_vectors() {
        // segmentio/ksuid's README example, and its nil and max values.
        let k = Ksuid::from_parts(107_608_047, hex16("B5A1CD34B5F99D1154FB6853345C9735"));
        assert_eq!(k.to_string(), "0ujtsYcgvSTl8PAuAdqWYSMnLOv");
        assert_eq!(
            Ksuid::from_parts(0, [0; 16]).to_string(),
            "000000000000000000000000000"
        );
        let max = Ksuid::from_parts(u32::MAX, [0xff; 16]);
        assert_eq!(max.to_string(), "aWgEPTl1tmebfsQzFP4bxwgy80V");
        assert_eq!("aWgEPTl1tmebfsQzFP4bxwgy80V".parse(), Ok(max));
        assert_eq!("0ujtsYcgvSTl8PAuAdqWYSMnLOv".parse(), Ok(k));
    }

    #[test]
    fn refuses_what_is_not_one() {
        assert_eq!(
            "aWgEPTl1tmebfsQzFP4bxwgy80W".parse::<Ksuid>(),
            Err(NotAKsuid)
        );
        assert_eq!("short".parse::<Ksuid>(), Err(NotAKsuid));
        // One character short of a KSUID and one over: both refused, not padded or cut.
        assert_eq!(
            "aWgEPTl1tmebfsQzFP4bxwgy80".parse::<Ksuid>(),
            Err(NotAKsuid)
        );
        assert_eq!(
            "10aWgEPTl1tmebfsQzFP4bxwgy80".parse::<Ksuid>(),
            Err(NotAKsuid)
        );
        assert_eq!(
            "0ujtsYcgvSTl8PAuAdqWYSMnLO-".parse::<Ksuid>(),
            Err(NotAKsuid)
        );
    }

    #[test]
    fn time_is_seconds_since_the_ksuid_epoch() {
        let now = UNIX_EPOCH + Duration::from_secs(KSUID_EPOCH + 42);
        assert_eq!(Ksuid::new(now, [1; 16]).timestamp(), 42);
        assert_eq!(Ksuid::new(UNIX_EPOCH, [1; 16]).timestamp(), 0);
        let far = UNIX_EPOCH + Duration::from_secs(KSUID_EPOCH + u64::from(u32::MAX) + 9);
        assert_eq!(Ksuid::new(far, [1; 16]).timestamp(), u32::MAX);
    }

    proptest! {
        #[test]
        fn text_round_trips_and_sorts_like_the_bytes(
            a in (any::<u32>(), any::<[u8; 16]>()),
            b in (any::<u32>(), any::<[u8; 16]>()),
        ) {
            let (ka, kb) = (Ksuid::from_parts(a.0, a.1), Ksuid::from_parts(b.0, b.1));
            let (sa, sb) = (ka.to_string(), kb.to_string());
            prop_assert_eq!(sa.len(), 27);
            prop_assert!(sa.bytes().all(|c| c.is_ascii_alphanumeric()));
            prop_assert_eq!(sa.parse::<Ksuid>(), Ok(ka));
            prop_assert_eq!(sa.cmp(&sb), ka.cmp(&kb));
            prop_assert_eq!(ka.timestamp(), a.0);
            prop_assert_eq!(ka.payload(), a.1);
        }
    }
}
