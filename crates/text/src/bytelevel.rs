//! GPT-2's byte-level alphabet: every byte is written as one printable character, so a
//! vocabulary of strings can hold arbitrary bytes. Bytes that are printable in Latin-1 stand for
//! themselves; the other 68 (controls, space, 0x7F..=0xA0, 0xAD) take the code points from U+0100
//! up, in byte order.

const fn printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The 68 bytes that are not printable, in order: byte `SHIFTED[i]` is written as U+0100 + i.
const SHIFTED: [u8; 68] = {
    let mut out = [0u8; 68];
    let mut n = 0;
    let mut b = 0usize;
    while b < 256 {
        if !printable(b as u8) {
            out[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    out
};

/// The character that stands for byte `b`.
pub(crate) fn byte_to_char(b: u8) -> char {
    if printable(b) {
        char::from(b)
    } else {
        let i = SHIFTED.iter().position(|&s| s == b).unwrap_or(0);
        // U+0100..=U+0143: always valid chars.
        char::from_u32(0x100 + i as u32).unwrap_or('\u{FFFD}')
    }
}

/// The byte a character stands for, if it is one of the 256 alphabet characters.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 {
        let b = cp as u8;
        printable(b).then_some(b)
    } else {
        SHIFTED.get((cp - 0x100) as usize).copied()
    }
}

/// Decodes a vocabulary string written in the byte-level alphabet. A character outside the
/// alphabet (which converters should not write) stands for its own UTF-8, as llama.cpp reads it.
pub(crate) fn decode_token(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_a_bijection_and_matches_gpt2_landmarks() {
        let mut seen = Vec::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert_eq!(char_to_byte(c), Some(b));
            seen.push(c);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 256);
        // Well-known points of the alphabet: space is 'Ġ', newline 'Ċ', tab 'ĉ'.
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'\t'), 'ĉ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(char_to_byte('€'), None);
        assert_eq!(char_to_byte('\u{AD}'), None);
        assert_eq!(decode_token("ĠHello"), b" Hello");
    }
}
