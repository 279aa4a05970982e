//! tally-gguf (in progress)
