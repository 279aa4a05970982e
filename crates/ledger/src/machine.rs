//! Machine facts the ledger can read itself (host, OS, CPU, time). GPU facts and measured
//! peaks come from the engine adapter or the CLI, which fill the rest of [`MachineInfo`].

use std::time::{SystemTime, UNIX_EPOCH};

use crate::schema::MachineInfo;

/// The CPU model from `/proc/cpuinfo` text (`model name`, or `Hardware`/`Processor` on ARM).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        let key = key.trim();
        (key == "model name" || key == "Hardware" || key == "Processor")
            .then(|| value.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// Days since 1970-01-01 to a civil (year, month, day), proleptic Gregorian (H. Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// An ISO-8601 UTC timestamp (`2026-05-01T12:34:56Z`) of `secs` since the Unix epoch.
pub fn iso8601_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as [`iso8601_utc`].
pub fn now_iso8601() -> String {
    iso8601_utc(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Host, OS, CPU model and thread count of this machine, timestamped now; no GPU, no peaks.
/// Unreadable facts are left empty (never an error: they describe, they do not decide).
pub fn local_machine() -> MachineInfo {
    let os = match (
        read_trimmed("/proc/sys/kernel/ostype"),
        read_trimmed("/proc/sys/kernel/osrelease"),
    ) {
        (Some(t), Some(r)) => format!("{t} {r}"),
        _ => std::env::consts::OS.to_string(),
    };
    MachineInfo {
        hostname: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
        os,
        cpu_model: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| parse_cpu_model(&t))
            .unwrap_or_default(),
        cpu_threads: std::thread::available_parallelism().map_or(0, |n| n.get()),
        gpu: None,
        peak_gbps: None,
        peak_tflops: None,
        peak_method: None,
        measured_at: now_iso8601(),
    }
}

/// Other processes holding a GPU context (from `nvidia-smi`), if any: a reason to discard a
/// timing window on a GPU backend. None when nvidia-smi is absent or reports nobody else.
pub fn other_gpu_processes() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,process_name,used_memory",
            "--format=csv,noheader",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    others_than(&String::from_utf8_lossy(&out.stdout), std::process::id())
}

/// Why the GPU is not in a state to be timed, if it is not: other processes on it, or clocks held
/// down (thermal or hardware slowdown, power brake) during the window. The software power cap is
/// not among them: with no other process on the GPU it is the measured work's own power draw
/// (a 1.4 s prefill of 32,768 tokens on the H200 reaches it every run, 2026-12-05), the speed a
/// user of that work gets, not noise.
pub fn gpu_busy() -> Option<String> {
    other_gpu_processes().or_else(gpu_clocks_held_down)
}

/// Active clock-event reasons that slow the GPU (`nvidia-smi`), if any.
pub fn gpu_clocks_held_down() -> Option<String> {
    for field in [
        "clocks_event_reasons.active",
        "clocks_throttle_reasons.active",
    ] {
        let out = std::process::Command::new("nvidia-smi")
            .args([
                format!("--query-gpu={field}").as_str(),
                "--format=csv,noheader",
            ])
            .output()
            .ok()?;
        if out.status.success() {
            return slowdown_reasons(&String::from_utf8_lossy(&out.stdout));
        }
    }
    None
}

/// The slowing reasons in an `nvidia-smi` clock-event bitmask (hex, one GPU per line); idle,
/// application-clock and display settings are not slowdowns, and neither is the software power
/// cap (0x4: see [`gpu_busy`]).
fn slowdown_reasons(text: &str) -> Option<String> {
    const SLOW: [(u64, &str); 4] = [
        (0x8, "hardware slowdown"),
        (0x40, "software thermal slowdown"),
        (0x80, "hardware thermal slowdown"),
        (0x100, "power brake"),
    ];
    let mut found = Vec::new();
    for line in text.lines() {
        let hex = line.trim().trim_start_matches("0x");
        let Ok(mask) = u64::from_str_radix(hex, 16) else {
            continue;
        };
        for (bit, what) in SLOW {
            if mask & bit != 0 && !found.contains(&what) {
                found.push(what);
            }
        }
    }
    (!found.is_empty()).then(|| format!("GPU clocks held down: {}", found.join(", ")))
}

/// The lines of `nvidia-smi --query-compute-apps` output that are not process `me`.
fn others_than(text: &str, me: u32) -> Option<String> {
    let me = me.to_string();
    let others: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| l.split(',').next().map(str::trim) != Some(me.as_str()))
        .collect();
    (!others.is_empty()).then(|| format!("other processes on the GPU: {}", others.join("; ")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_slowdown_bits() {
        assert_eq!(super::slowdown_reasons("0x0000000000000001\n"), None); // idle
        assert_eq!(
            super::slowdown_reasons("0x0000000000000084\n").as_deref(),
            Some("GPU clocks held down: hardware thermal slowdown")
        );
        // The software power cap alone: the work's own power draw, not a reason to re-measure.
        assert_eq!(super::slowdown_reasons("0x0000000000000004\n"), None);
        assert_eq!(
            super::slowdown_reasons("0x000000000000000C\n").as_deref(),
            Some("GPU clocks held down: hardware slowdown")
        );
        assert_eq!(super::slowdown_reasons("[N/A]\n"), None);
    }

    #[test]
    fn gpu_process_lines_other_than_ours() {
        let t = "123, tally, 20000 MiB\n456, python3, 1000 MiB\n";
        assert_eq!(
            super::others_than(t, 123).as_deref(),
            Some("other processes on the GPU: 456, python3, 1000 MiB")
        );
        assert_eq!(super::others_than("123, tally, 1 MiB\n", 123), None);
        assert_eq!(super::others_than("", 1), None);
    }

    use super::*;

    #[test]
    fn timestamps_by_hand() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 (leap day) 12:00:01 = 951825601.
        assert_eq!(iso8601_utc(951_825_601), "2000-02-29T12:00:01Z");
        // 2024-12-31T23:59:59 = 1735689599.
        assert_eq!(iso8601_utc(1_735_689_599), "2024-12-31T23:59:59Z");
    }

    #[test]
    fn cpu_model_parsing() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n";
        assert_eq!(
            parse_cpu_model(x86).as_deref(),
            Some("AMD EPYC 9654 96-Core Processor")
        );
        assert_eq!(parse_cpu_model("flags : fpu\n"), None);
    }

    #[test]
    fn local_machine_is_filled_where_readable() {
        let m = local_machine();
        assert!(m.measured_at.ends_with('Z'));
        assert!(m.cpu_threads >= 1);
    }
}
