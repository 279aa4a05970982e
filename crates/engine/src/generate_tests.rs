//! Output text: UTF-8 held back across tokens, stop strings across tokens.

use super::Output;

fn run(stop: &[&str], pieces: &[&[u8]]) -> (Vec<String>, bool, String) {
    let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
    let mut o = Output::new(&stop);
    let mut events = Vec::new();
    for p in pieces {
        let (s, stopped) = o.push(p);
        events.push(s);
        if stopped {
            return (events, true, o.text);
        }
    }
    events.push(o.flush());
    (events, false, o.text)
}

#[test]
fn a_character_split_across_tokens_is_emitted_whole() {
    let e = "é".as_bytes(); // two bytes
    let (ev, stopped, text) = run(&[], &[b"caf", &e[..1], &e[1..], b"!"]);
    assert!(!stopped);
    assert_eq!(ev, vec!["caf", "", "é", "!", ""]);
    assert_eq!(text, "café!");
    let emoji = "👍".as_bytes();
    let (ev, _, _) = run(&[], &[&emoji[..1], &emoji[1..3], &emoji[3..]]);
    assert_eq!(ev, vec!["", "", "👍", ""]);
}

#[test]
fn invalid_bytes_become_replacement_characters() {
    let (_, _, text) = run(&[], &[b"a\xffb", b"\xe2\x82"]);
    // The invalid byte is replaced at once, the incomplete tail at the end.
    assert_eq!(text, "a\u{FFFD}b\u{FFFD}");
}

#[test]
fn stop_string_across_tokens_is_held_back_and_cut() {
    let (ev, stopped, text) = run(&["</end>"], &[b"hello </", b"en", b"d> more"]);
    assert!(stopped);
    assert_eq!(ev, vec!["hello ", "", ""]);
    assert_eq!(text, "hello ");
}

#[test]
fn a_false_start_of_a_stop_string_is_released() {
    let (ev, stopped, text) = run(&["STOP"], &[b"ST", b"AR", b"T"]);
    assert!(!stopped);
    assert_eq!(ev.concat(), "START");
    assert_eq!(ev[0], "");
    assert_eq!(text, "START");
}

#[test]
fn earliest_stop_string_wins() {
    let (_, stopped, text) = run(&["b", "a"], &[b"xxab"]);
    assert!(stopped);
    assert_eq!(text, "xx");
}
