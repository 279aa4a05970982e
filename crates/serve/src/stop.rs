//! Stop strings over streamed text: text is released as soon as it cannot be the start of a stop
//! string, and a matched stop string is never sent (OpenAI's behaviour).

/// Holds back the tail of the generated text that may still grow into a stop string.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

/// What one piece of text produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Fed {
    /// Text safe to send now.
    pub emit: String,
    /// A stop string matched: nothing after `emit` may be sent.
    pub stopped: bool,
}

impl StopMatcher {
    /// `stops` must be non-empty strings (the server rejects empty ones).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops,
            pending: String::new(),
        }
    }

    pub fn feed(&mut self, text: &str) -> Fed {
        if self.stops.is_empty() {
            return Fed {
                emit: text.to_string(),
                stopped: false,
            };
        }
        self.pending.push_str(text);
        // The earliest match of any stop string wins.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let emit = self.pending[..at].to_string();
            self.pending.clear();
            return Fed {
                emit,
                stopped: true,
            };
        }
        // Keep the longest suffix that is a proper prefix of a stop string.
        let keep = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len());
        let emit = self.pending[..keep].to_string();
        self.pending.drain(..keep);
        Fed {
            emit,
            stopped: false,
        }
    }

    /// The held-back text at the end of a generation that no stop string ended.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let f = m.feed(p);
            out.push_str(&f.emit);
            if f.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stop_split_across_pieces_is_not_sent() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D tail"]),
            ("hello ".into(), true)
        );
    }

    #[test]
    fn false_start_is_released() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.feed("a E").emit, "a ");
        assert_eq!(m.feed("x").emit, "Ex");
        assert_eq!(run(&["END"], &["a EN", "x"]), ("a ENx".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_is_safe() {
        assert_eq!(run(&["é!", "b"], &["ça é! b"]), ("ça ".into(), true));
        assert_eq!(run(&["\n\n"], &["x\n", "y"]), ("x\ny".into(), false));
    }

    #[test]
    fn no_stops_passes_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }
}
