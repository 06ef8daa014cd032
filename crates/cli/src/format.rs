//! Output formatting shared by the commands, matching zpool(8)/zfs(8) so scripts that parse
//! their output keep working: human sizes (`zfs_nicenum`), tab-separated `-H` output, and
//! column-aligned tables.

/// Human-readable size as OpenZFS prints it (`zfs_nicenum`): exact multiples print with no
/// decimals ("128K"); others get the most precision that fits in 5 characters ("1.50M").
pub fn nicenum(num: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut index = 0;
    let mut n = num;
    while n >= 1024 && index < UNITS.len() - 1 {
        n /= 1024;
        index += 1;
    }
    if index == 0 {
        return num.to_string();
    }
    let unit = UNITS[index];
    let mask = (1u64 << (10 * index)) - 1;
    if num & mask == 0 {
        return format!("{n}{unit}");
    }
    let val = num as f64 / (1u64 << (10 * index)) as f64;
    for prec in (0..=2).rev() {
        let s = format!("{val:.prec$}{unit}");
        if s.len() <= 5 {
            return s;
        }
    }
    format!("{val:.0}{unit}")
}

/// Formats a number column: exact with `-p`, human otherwise.
pub fn size(num: u64, parsable: bool) -> String {
    if parsable {
        num.to_string()
    } else {
        nicenum(num)
    }
}

/// A table printed like `zfs list`: header row in upper case, columns separated by two
/// spaces and left-aligned (numbers right-aligned), or with `-H` tab-separated, no header.
pub struct Table {
    pub headers: Vec<String>,
    pub right_align: Vec<bool>,
    pub rows: Vec<Vec<String>>,
    /// Least width of each column (zpool's fixed-width columns are as wide as any value
    /// could be, whatever the values shown); missing entries: none.
    pub min_width: Vec<usize>,
}

impl Table {
    /// A table with these column names (printed upper-cased).
    pub fn new(headers: &[&str], right_align: &[bool]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_uppercase()).collect(),
            right_align: right_align.to_vec(),
            rows: Vec::new(),
            min_width: Vec::new(),
        }
    }

    /// Renders the table; `scripted` is `-H`.
    pub fn render(&self, scripted: bool) -> String {
        let mut out = String::new();
        if scripted {
            for r in &self.rows {
                out.push_str(&r.join("\t"));
                out.push('\n');
            }
            return out;
        }
        let ncol = self.headers.len();
        let mut w = vec![0usize; ncol];
        for (i, h) in self.headers.iter().enumerate() {
            w[i] = h.len().max(self.min_width.get(i).copied().unwrap_or(0));
        }
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(ncol) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut String| {
            let mut parts = Vec::new();
            for (i, c) in cells.iter().enumerate().take(ncol) {
                let right = self.right_align.get(i).copied().unwrap_or(false);
                let last = i + 1 == ncol;
                let s = if right {
                    format!("{c:>width$}", width = w[i])
                } else if last {
                    c.clone()
                } else {
                    format!("{c:<width$}", width = w[i])
                };
                parts.push(s);
            }
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.headers, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nicenum_matches_openzfs() {
        assert_eq!(nicenum(0), "0");
        assert_eq!(nicenum(1023), "1023");
        assert_eq!(nicenum(1024), "1K");
        assert_eq!(nicenum(131072), "128K");
        assert_eq!(nicenum(1536), "1.50K");
        assert_eq!(nicenum(24 * 1024 + 512), "24.5K");
        assert_eq!(nicenum(1000 * 1024 * 1024 + 1), "1000M");
        assert_eq!(nicenum(3 << 30), "3G");
    }

    #[test]
    fn scripted_tables_are_tab_separated() {
        let mut t = Table::new(&["name", "used"], &[false, true]);
        t.rows.push(vec!["tank".into(), "1.50K".into()]);
        assert_eq!(t.render(true), "tank\t1.50K\n");
        assert_eq!(t.render(false), "NAME   USED\ntank  1.50K\n");
    }
}

/// (year, month 1-12, day) of a day count since 1970-01-01 (proleptic Gregorian).
fn civil(days: u64) -> (i64, i64, i64) {
    // Civil-from-days, after Howard Hinnant's public-domain algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A UTC timestamp as `zpool history` prints it ("2026-11-21.14:27:00").
pub fn history_time(secs: u64) -> String {
    let (y, m, d) = civil(secs / 86400);
    let rem = secs % 86400;
    format!("{y:04}-{m:02}-{d:02}.{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// An event's time as `zpool events` prints it: `ctime`'s month and day, year, time of
/// day, then nanoseconds ("Nov 25 2026 08:41:31.123456789").
pub fn event_time(secs: u64, nanos: u64) -> String {
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (y, m, d) = civil(secs / 86400);
    let rem = secs % 86400;
    format!(
        "{} {d:>2} {y:04} {:02}:{:02}:{:02}.{nanos:09}",
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A UTC timestamp as zfs prints `creation` ("Sat Nov 21 14:27 2026").
pub fn ctime(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs / 86400;
    let rem = secs % 86400;
    let (y, m, d) = civil(days);
    format!(
        "{} {} {:>2} {:02}:{:02} {}",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        d,
        rem / 3600,
        rem % 3600 / 60,
        y
    )
}

/// A UTC timestamp as zfs prints `snapshots_changed` (strftime "%a %b %e %k:%M:%S %Y":
/// "Sat Nov 21  9:07:03 2026").
pub fn ctime_full(secs: u64) -> String {
    let short = ctime(secs);
    let mut parts: Vec<&str> = short.split(' ').filter(|p| !p.is_empty()).collect();
    let year = parts.pop().unwrap_or("");
    let hm = parts.pop().unwrap_or("");
    let day = parts.pop().unwrap_or("");
    let hour = hm.split(':').next().and_then(|h| h.parse::<u32>().ok()).unwrap_or(0);
    format!("{} {day:>2} {hour:>2}:{:02}:{:02} {year}", parts.join(" "), secs % 3600 / 60, secs % 60)
}

/// A UTC timestamp as ctime(3) prints it ("Sat Nov 21 14:27:00 2026"), as zpool status
/// shows scan times.
pub fn ctime_secs(secs: u64) -> String {
    let short = ctime(secs);
    // "Sat Nov 21 14:27 2026" -> insert the seconds after the minutes.
    let (head, year) = short.rsplit_once(' ').unwrap_or((&short, ""));
    format!("{head}:{:02} {year}", secs % 60)
}

/// Sizes as `zfs_nicebytes` prints them: like [`nicenum`], with a "B" on plain bytes.
pub fn nicebytes(n: u64) -> String {
    if n < 1024 {
        format!("{n}B")
    } else {
        nicenum(n)
    }
}

/// `secs_to_dhms` of zpool_main.c.
pub fn dhms(total: u64) -> String {
    let (d, h, m, s) = (total / 86400, total / 3600 % 24, total / 60 % 60, total % 60);
    if d > 0 {
        format!("{d} days {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// The text after "  scan: " in `zpool status` (zpool_main.c
/// `print_scan_scrub_resilver_status`), lines after the first starting with a tab.
pub fn scan_text(st: &pool::scan::ScanStatus, now: u64) -> String {
    use pool::scan::{state, ScanFunc};
    let p = &st.phys;
    let scrub = p.func == ScanFunc::Scrub as u64;
    let resilver = p.func == ScanFunc::Resilver as u64;
    if !scrub && !resilver {
        return "none requested\n".into();
    }
    let processed = nicebytes(p.processed);
    if p.state == state::FINISHED {
        let t = dhms(p.end_time.saturating_sub(p.start_time));
        let when = ctime_secs(p.end_time);
        return if scrub {
            format!("scrub repaired {processed} in {t} with {} errors on {when}\n", p.errors)
        } else {
            format!("resilvered {processed} in {t} with {} errors on {when}\n", p.errors)
        };
    }
    if p.state == state::CANCELED {
        let what = if scrub { "scrub" } else { "resilver" };
        return format!("{what} canceled on {}\n", ctime_secs(p.end_time));
    }
    let mut out = String::new();
    let paused = p.is_paused();
    if scrub && paused {
        let since = if st.pass_paused_at != 0 { st.pass_paused_at } else { now };
        out.push_str(&format!("scrub paused since {}\n", ctime_secs(since)));
        out.push_str(&format!("\tscrub started on {}\n", ctime_secs(p.start_time)));
    } else if scrub {
        out.push_str(&format!("scrub in progress since {}\n", ctime_secs(p.start_time)));
    } else {
        out.push_str(&format!("resilver in progress since {}\n", ctime_secs(p.start_time)));
    }
    let total_i = p.to_examine.saturating_sub(p.skipped);
    let elapsed = now.saturating_sub(st.pass_start).saturating_sub(st.pass_spent_paused).max(1);
    let (srate, irate) = (st.pass_examined / elapsed, st.pass_issued / elapsed);
    out.push_str(&format!("\t{} / {} scanned", nicebytes(p.examined), nicebytes(p.to_examine)));
    if !paused && srate > 0 {
        out.push_str(&format!(" at {}/s", nicebytes(srate)));
    }
    out.push_str(&format!(", {} / {} issued", nicebytes(st.issued), nicebytes(total_i)));
    if !paused && irate > 0 {
        out.push_str(&format!(" at {}/s", nicebytes(irate)));
    }
    let done = if total_i == 0 { 0.0 } else { 100.0 * st.issued as f64 / total_i as f64 };
    let verb = if resilver { "resilvered" } else { "repaired" };
    out.push_str(&format!("\n\t{processed} {verb}, {done:.2}% done"));
    if paused {
        out.push('\n');
    } else if total_i >= st.issued
        && irate >= 10 << 20
        && ((resilver && p.processed > 0) || (scrub && st.issued > 0))
    {
        out.push_str(&format!(", {} to go\n", dhms((total_i - st.issued) / irate)));
    } else {
        out.push_str(", no estimated completion time\n");
    }
    out
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn ctime_formats_like_zfs() {
        assert_eq!(super::ctime(0), "Thu Jan  1 00:00 1970");
        assert_eq!(super::ctime(1_795_271_220), "Sat Nov 21 14:27 2026");
        assert_eq!(super::history_time(1_795_271_220), "2026-11-21.14:27:00");
        assert_eq!(super::event_time(1_795_271_220, 42), "Nov 21 2026 14:27:00.000000042");
        assert_eq!(super::ctime_secs(1_795_271_225), "Sat Nov 21 14:27:05 2026");
        assert_eq!(super::ctime_full(1_795_271_225), "Sat Nov 21 14:27:05 2026");
        assert_eq!(super::ctime_full(0), "Thu Jan  1  0:00:00 1970");
        assert_eq!(super::dhms(3725), "01:02:05");
        assert_eq!(super::dhms(90061), "1 days 01:01:01");
        assert_eq!(super::nicebytes(0), "0B");
        assert_eq!(super::nicebytes(1536), "1.50K");
    }
}
