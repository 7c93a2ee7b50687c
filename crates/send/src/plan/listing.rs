//! Reading what a destination holds: the output of `rreceive --list`
//! (its lines are [`btrfs_text::list`]'s) that `--parent-from` is given.
//! Calls [`btrfs_text::list`] and the plan's errors.

use btrfs_text::list::{End, Line};

use super::error::PlanError;

/// Reads `rreceive --list` output (text or `--json`), which must end with
/// the end line rreceive prints last, counting the subvolumes above it:
/// a list without it (empty, or cut short by a dropped connection) or
/// whose count disagrees is an error, so that a lost list never turns
/// into a full send. Lines it cannot read are an error naming the line.
pub fn parse_list(text: &str) -> Result<Vec<Line>, PlanError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let bad_line = |n: usize, line: &str| PlanError::ListLine {
        line: n + 1,
        text: line.to_string(),
    };
    let Some((&(last_n, last), body)) = lines.split_last() else {
        return Err(PlanError::ListEmpty);
    };
    let Some(count) = End::parse(last).map_err(|_| bad_line(last_n, last))? else {
        return Err(PlanError::ListCut { line: last_n + 1 });
    };
    let mut out = Vec::new();
    for &(n, line) in body {
        if End::parse(line).map_err(|_| bad_line(n, line))?.is_some() {
            return Err(PlanError::ListAfterEnd {
                line: n + 1,
                of: last_n + 1,
            });
        }
        out.push(Line::parse(line).map_err(|_| bad_line(n, line))?);
    }
    if count.subvolumes != out.len() as u64 {
        return Err(PlanError::ListCount {
            line: last_n + 1,
            count: count.subvolumes,
            listed: out.len(),
        });
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
        assert!(held.iter().all(|h| !h.complete()));
        let json = format!(
            "{{\"name\":\"s1\",\"received_uuid\":\"{u}\",\"complete\":false,\"receiving\":true,\"pid\":42}}\n{{\"end\":true,\"subvolumes\":1}}\n"
        );
        assert!(!parse_list(&json).unwrap()[0].complete());
        let odd = format!("s1\t{u}\t7\t-\treceivingx\n# end of list: 1 subvolume\n");
        assert!(parse_list(&odd).is_err());
    }
}
