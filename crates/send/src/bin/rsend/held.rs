//! Reading what a destination holds: the output of `rreceive --list`
//! that `--parent-from` is given.

/// One subvolume a destination holds, as `rreceive --list` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    /// The uuid it was received as.
    pub(crate) uuid: uuid::Uuid,
    /// Whether its receive finished.
    pub(crate) complete: bool,
}

/// What `--parent-from` says when the list does not end with the end
/// line `rreceive --list` prints last.
const CUT_LIST: &str = "the destination's listing is missing or cut short (no end line from \
     rreceive --list";
/// ... and what it does then.
const NOT_SENDING: &str = "not sending, to avoid a full send by mistake";

/// The end line of `rreceive --list`: `# end of list: N subvolumes` (no
/// tab: a subvolume's line always has four) or, with `--json`,
/// `{"end":true,"subvolumes":N}`. `None` when `line` is not one; an error
/// when it starts like one and is not.
fn end_line(line: &str, bad: &dyn Fn() -> anyhow::Error) -> anyhow::Result<Option<u64>> {
    if let Some(rest) = line.strip_prefix("# end of list: ") {
        if line.contains('\t') {
            return Ok(None);
        }
        let n = rest
            .strip_suffix(" subvolumes")
            .or_else(|| rest.strip_suffix(" subvolume"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        return Ok(Some(n));
    }
    if !line.trim_start().starts_with('{') {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
    if v.get("end").is_none() {
        return Ok(None);
    }
    match (v["end"].as_bool(), v["subvolumes"].as_u64()) {
        (Some(true), Some(n)) => Ok(Some(n)),
        _ => Err(bad()),
    }
}

/// Reads `rreceive --list` output (text or `--json`), which must end with
/// the end line rreceive prints last, counting the subvolumes above it:
/// a list without it (empty, or cut short by a dropped connection) or
/// whose count disagrees is an error, so that a lost list never turns
/// into a full send. Lines it cannot read are an error naming the line.
pub(crate) fn parse_list(text: &str) -> anyhow::Result<Vec<Held>> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let bad_line = |n: usize, line: &str| {
        anyhow::anyhow!(
            "line {} of the list is not what rreceive --list prints: {line:?}",
            n + 1
        )
    };
    let Some((&(last_n, last), body)) = lines.split_last() else {
        anyhow::bail!("{CUT_LIST}; the list is empty): {NOT_SENDING}");
    };
    let Some(count) = end_line(last, &|| bad_line(last_n, last))? else {
        anyhow::bail!(
            "{CUT_LIST}; it stops at line {}): {NOT_SENDING}",
            last_n + 1
        );
    };
    let mut out = Vec::new();
    for &(n, line) in body {
        let bad = || bad_line(n, line);
        if end_line(line, &bad)?.is_some() {
            anyhow::bail!(
                "the destination's listing goes on after its end line (line {} of {}): \
                 {NOT_SENDING}",
                n + 1,
                last_n + 1
            );
        }
        let held = if line.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
            Held {
                uuid: v["received_uuid"]
                    .as_str()
                    .and_then(|u| uuid::Uuid::parse_str(u).ok())
                    .ok_or_else(bad)?,
                complete: v["complete"].as_bool().ok_or_else(bad)?,
            }
        } else {
            // NAME UUID CTRANSID PARENT STATE, tab-separated; the name
            // (escaped) comes first, so read from the right.
            let f: Vec<&str> = line.rsplitn(5, '\t').collect();
            if f.len() != 5 {
                return Err(bad());
            }
            Held {
                uuid: uuid::Uuid::parse_str(f[3]).map_err(|_| bad())?,
                complete: match f[0] {
                    "complete" => true,
                    "incomplete" | "resumable" => false,
                    // Another rreceive is receiving it: `receiving (pid N)`.
                    s if s == "receiving" || s.starts_with("receiving (") => false,
                    _ => return Err(bad()),
                },
            }
        };
        out.push(held);
    }
    if count != out.len() as u64 {
        anyhow::bail!(
            "the destination's listing is cut short: its end line (line {}) counts {count} \
             subvolumes and {} are listed: {NOT_SENDING}",
            last_n + 1,
            out.len()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subvolume another rreceive is receiving is listed, not complete,
    /// in text and in JSON.
    #[test]
    fn a_subvolume_being_received_is_not_complete() {
        let u = "0b5c9a2e-1f3d-4e6a-9b8c-7d6e5f4a3b2c";
        let text = format!(
            "s1\t{u}\t7\t-\treceiving (pid 42)\ns\\ 2\t{u}\t8\t-\treceiving\n# end of list: 2 subvolumes\n"
        );
        let held = parse_list(&text).unwrap();
        assert_eq!(held.len(), 2);
        assert!(held.iter().all(|h| !h.complete));
        let json = format!(
            "{{\"name\":\"s1\",\"received_uuid\":\"{u}\",\"complete\":false,\"receiving\":true,\"pid\":42}}\n{{\"end\":true,\"subvolumes\":1}}\n"
        );
        assert!(!parse_list(&json).unwrap()[0].complete);
        let odd = format!("s1\t{u}\t7\t-\treceivingx\n# end of list: 1 subvolume\n");
        assert!(parse_list(&odd).is_err());
    }
}
