//! Prometheus metrics, served as text at `GET /metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// The server's counters. Every metric is prefixed `tally_`.
pub struct Metrics {
    registry: Registry,
    /// Answered requests by endpoint (the route, e.g. `/v1/chat/completions`) and status code.
    pub requests: IntCounterVec,
    pub prompt_tokens: IntCounter,
    pub generated_tokens: IntCounter,
    /// Requests admitted and waiting for the engine.
    pub queue_depth: IntGauge,
    /// Generations running on the engine (0 or 1).
    pub running: IntGauge,
    /// Finished generations by reason: stop, length, cancelled, error.
    pub finished: IntCounterVec,
    /// Seconds from admission to the first generated token.
    pub ttft_seconds: Histogram,
    /// Decode speed of one generation after its first token, tokens per second.
    pub decode_tokens_per_second: Histogram,
}

fn must<T>(r: prometheus::Result<T>) -> T {
    // Only a duplicate or malformed metric name fails, and the names are constants.
    match r {
        Ok(v) => v,
        Err(e) => panic!("metric definition: {e}"),
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = must(IntCounterVec::new(
            Opts::new("tally_requests_total", "HTTP requests answered"),
            &["endpoint", "status"],
        ));
        let prompt_tokens = must(IntCounter::new(
            "tally_prompt_tokens_total",
            "Prompt tokens of admitted requests",
        ));
        let generated_tokens = must(IntCounter::new(
            "tally_generated_tokens_total",
            "Tokens generated",
        ));
        let queue_depth = must(IntGauge::new(
            "tally_queue_depth",
            "Requests waiting for the engine",
        ));
        let running = must(IntGauge::new(
            "tally_requests_running",
            "Generations running on the engine",
        ));
        let finished = must(IntCounterVec::new(
            Opts::new(
                "tally_generations_total",
                "Finished generations by reason (stop, length, cancelled, error)",
            ),
            &["reason"],
        ));
        let ttft_seconds = must(Histogram::with_opts(
            HistogramOpts::new(
                "tally_time_to_first_token_seconds",
                "Seconds from admission (queue wait included) to the first generated token",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
        ));
        let decode_tokens_per_second = must(Histogram::with_opts(
            HistogramOpts::new(
                "tally_decode_tokens_per_second",
                "Decode speed of a generation after its first token",
            )
            .buckets(vec![
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
            ]),
        ));
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(prompt_tokens.clone()),
            Box::new(generated_tokens.clone()),
            Box::new(queue_depth.clone()),
            Box::new(running.clone()),
            Box::new(finished.clone()),
            Box::new(ttft_seconds.clone()),
            Box::new(decode_tokens_per_second.clone()),
        ] {
            must(registry.register(c));
        }
        Metrics {
            registry,
            requests,
            prompt_tokens,
            generated_tokens,
            queue_depth,
            running,
            finished,
            ttft_seconds,
            decode_tokens_per_second,
        }
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
