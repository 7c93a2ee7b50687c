//! The lines of `rreceive --list DEST`, written and read here only:
//! rreceive prints them, `rsend --parent-from` reads them.
//!
//! One [`Line`] per subvolume received in DEST, then one [`End`] line
//! that counts them, so that a reader can tell a whole listing (an empty
//! one included) from one cut short. Each has a text form (tab-separated
//! columns, [`fmt::Display`]) and, with the feature `json`, a JSON form
//! (one object per line); [`Line::parse`] and [`End::parse`] read either.
//!
//! Owns the format only: what DEST holds is the receive crate's, what a
//! listing means for a send is rsend's. Calls [`crate::escape`] and
//! `crate::json` (feature `json`).

use std::fmt;

use uuid::Uuid;

/// One subvolume received in DEST, as a line of `rreceive --list`.
///
/// Text: `NAME UUID CTRANSID PARENT STATE`, tab-separated, the name
/// escaped ([`crate::escape`]); JSON: an object with `name`,
/// `received_uuid`, `ctransid`, `incremental`, `parent_uuid`,
/// `parent_ctransid`, `complete`, `resumable`, `receiving` and `pid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Its name in DEST.
    pub name: Vec<u8>,
    /// The uuid it was received as.
    pub received_uuid: Uuid,
    /// Its transid on the sending side.
    pub ctransid: u64,
    /// What it was received against.
    pub parent: Parent,
    /// The parent's transid on the sending side (0 for a full receive);
    /// only the JSON form carries it.
    pub parent_ctransid: u64,
    /// How far its receive got.
    pub state: State,
}

/// What a received subvolume was received against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parent {
    /// Nothing: a full receive (text `-`, JSON `parent_uuid` null).
    Full,
    /// An incremental whose parent's received uuid is not known (text
    /// `?`, JSON `parent_uuid` null with `incremental` true).
    Unknown,
    /// An incremental against the parent received as this uuid.
    Of(Uuid),
}

/// How far the receive of a listed subvolume got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// The stream's END was applied.
    Complete,
    /// Incomplete, and another rreceive is receiving it now.
    Receiving(Receiver),
    /// Incomplete, stopped cleanly: a resumed send completes it.
    Resumable,
    /// Incomplete.
    Incomplete,
}

/// The rreceive receiving a listed subvolume now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Receiver {
    /// Its process id, when known (the JSON form's `pid`).
    pub pid: Option<u32>,
    /// Who it is in words (`pid N`, `pid N on HOST`), as the text form
    /// shows it in parentheses after `receiving`.
    pub who: Option<String>,
}

/// The last line of `rreceive --list`: [`END_TEXT`] then `N subvolumes`
/// (`1 subvolume`; never a tab: a subvolume's line always has four), or
/// with `--json` `{"end":true,"subvolumes":N}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// How many subvolume lines come before it.
    pub subvolumes: u64,
}

/// A line that is not what `rreceive --list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a line of rreceive --list")]
pub struct NotALine;

/// The start of the text form of the [`End`] line.
pub const END_TEXT: &str = "# end of list: ";

impl fmt::Display for Parent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parent::Full => f.write_str("-"),
            Parent::Unknown => f.write_str("?"),
            Parent::Of(u) => write!(f, "{}", u.hyphenated()),
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Complete => f.write_str("complete"),
            State::Resumable => f.write_str("resumable"),
            State::Incomplete => f.write_str("incomplete"),
            // One column still (no tab), the word first.
            State::Receiving(Receiver { who: Some(w), .. }) => write!(f, "receiving ({w})"),
            State::Receiving(Receiver { who: None, .. }) => f.write_str("receiving"),
        }
    }
}

impl fmt::Display for Line {
    /// The text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}",
            crate::escape::escape(&self.name),
            self.received_uuid.hyphenated(),
            self.ctransid,
            self.parent,
            self.state
        )
    }
}

impl fmt::Display for End {
    /// The text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.subvolumes;
        let s = if n == 1 { "" } else { "s" };
        write!(f, "{END_TEXT}{n} subvolume{s}")
    }
}

/// Whether `line` is in the JSON form.
fn is_json(line: &str) -> bool {
    line.trim_start().starts_with('{')
}

impl Line {
    /// Whether its receive finished.
    pub fn complete(&self) -> bool {
        self.state == State::Complete
    }

    /// Reads a subvolume's line, in either form. What a reader decides
    /// by is checked: the received uuid and the state. The other fields
    /// are taken when they read well, else left empty or zero (name
    /// empty, ctransid 0, a full receive), as older readers ignored them.
    pub fn parse(line: &str) -> Result<Line, NotALine> {
        if is_json(line) {
            return Line::parse_json(line);
        }
        // NAME UUID CTRANSID PARENT STATE; the name (escaped) comes
        // first, so read from the right.
        let f: Vec<&str> = line.rsplitn(5, '\t').collect();
        let [state, parent, ctransid, uuid, name] = f[..] else {
            return Err(NotALine);
        };
        Ok(Line {
            name: crate::escape::unescape(name.as_bytes()),
            received_uuid: Uuid::parse_str(uuid).map_err(|_| NotALine)?,
            ctransid: ctransid.parse().unwrap_or(0),
            parent: match parent {
                "?" => Parent::Unknown,
                p => Uuid::parse_str(p).map_or(Parent::Full, Parent::Of),
            },
            parent_ctransid: 0,
            state: parse_state(state)?,
        })
    }

    #[cfg(not(feature = "json"))]
    fn parse_json(_: &str) -> Result<Line, NotALine> {
        Err(NotALine)
    }

    #[cfg(feature = "json")]
    fn parse_json(line: &str) -> Result<Line, NotALine> {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|_| NotALine)?;
        let received_uuid = v["received_uuid"]
            .as_str()
            .and_then(|u| Uuid::parse_str(u).ok())
            .ok_or(NotALine)?;
        let flag = |k: &str| v[k].as_bool().unwrap_or(false);
        let state = match v["complete"].as_bool().ok_or(NotALine)? {
            true => State::Complete,
            false if flag("receiving") => State::Receiving(Receiver {
                pid: v["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
                who: None,
            }),
            false if flag("resumable") => State::Resumable,
            false => State::Incomplete,
        };
        let parent = match v["parent_uuid"].as_str().map(Uuid::parse_str) {
            Some(Ok(u)) => Parent::Of(u),
            _ if flag("incremental") => Parent::Unknown,
            _ => Parent::Full,
        };
        Ok(Line {
            name: crate::json::value_bytes(&v["name"]).unwrap_or_default(),
            received_uuid,
            ctransid: v["ctransid"].as_u64().unwrap_or(0),
            parent,
            parent_ctransid: v["parent_ctransid"].as_u64().unwrap_or(0),
            state,
        })
    }

    /// The JSON form, one object.
    #[cfg(feature = "json")]
    pub fn to_json(&self) -> String {
        let parent = match self.parent {
            Parent::Of(u) => Some(u.hyphenated().to_string()),
            _ => None,
        };
        let pid = match &self.state {
            State::Receiving(r) => r.pid,
            _ => None,
        };
        serde_json::json!({
            "name": crate::json::bytes_value(&self.name),
            "received_uuid": self.received_uuid.hyphenated().to_string(),
            "ctransid": self.ctransid,
            "incremental": self.parent != Parent::Full,
            "parent_uuid": parent,
            "parent_ctransid": self.parent_ctransid,
            "complete": self.complete(),
            "resumable": self.state == State::Resumable,
            "receiving": matches!(self.state, State::Receiving(_)),
            "pid": pid,
        })
        .to_string()
    }
}

/// The STATE column of the text form.
fn parse_state(s: &str) -> Result<State, NotALine> {
    Ok(match s {
        "complete" => State::Complete,
        "resumable" => State::Resumable,
        "incomplete" => State::Incomplete,
        "receiving" => State::Receiving(Receiver::default()),
        s => {
            // `receiving (pid N)`, `receiving (pid N on HOST)`.
            let who = s.strip_prefix("receiving (").ok_or(NotALine)?;
            let who = who.strip_suffix(')').unwrap_or(who);
            let pid = who
                .strip_prefix("pid ")
                .and_then(|p| p.split(' ').next().and_then(|n| n.parse().ok()));
            State::Receiving(Receiver {
                pid,
                who: Some(who.to_string()),
            })
        }
    })
}

impl End {
    /// Reads `line` as the end line, in either form: `None` when it is
    /// not one, [`NotALine`] when it starts like one and is not.
    pub fn parse(line: &str) -> Result<Option<End>, NotALine> {
        if let Some(rest) = line.strip_prefix(END_TEXT) {
            if line.contains('\t') {
                return Ok(None);
            }
            let n = rest
                .strip_suffix(" subvolumes")
                .or_else(|| rest.strip_suffix(" subvolume"))
                .and_then(|n| n.parse().ok())
                .ok_or(NotALine)?;
            return Ok(Some(End { subvolumes: n }));
        }
        if !is_json(line) {
            return Ok(None);
        }
        End::parse_json(line)
    }

    #[cfg(not(feature = "json"))]
    fn parse_json(_: &str) -> Result<Option<End>, NotALine> {
        Ok(None)
    }

    #[cfg(feature = "json")]
    fn parse_json(line: &str) -> Result<Option<End>, NotALine> {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|_| NotALine)?;
        if v.get("end").is_none() {
            return Ok(None);
        }
        match (v["end"].as_bool(), v["subvolumes"].as_u64()) {
            (Some(true), Some(n)) => Ok(Some(End { subvolumes: n })),
            _ => Err(NotALine),
        }
    }

    /// The JSON form, one object.
    #[cfg(feature = "json")]
    pub fn to_json(&self) -> String {
        serde_json::json!({ "end": true, "subvolumes": self.subvolumes }).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "0b5c9a2e-1f3d-4e6a-9b8c-7d6e5f4a3b2c";

    fn line(state: State, parent: Parent) -> Line {
        Line {
            name: b"snap 1\xff".to_vec(),
            received_uuid: Uuid::parse_str(U).unwrap(),
            ctransid: 7,
            parent,
            parent_ctransid: 0,
            state,
        }
    }

    #[test]
    fn the_text_form_reads_back() {
        let receiving = State::Receiving(Receiver {
            pid: Some(42),
            who: Some("pid 42 on host".into()),
        });
        for l in [
            line(State::Complete, Parent::Full),
            line(State::Resumable, Parent::Unknown),
            line(receiving, Parent::Of(Uuid::from_u128(9))),
        ] {
            assert_eq!(Line::parse(&l.to_string()), Ok(l.clone()));
        }
        assert_eq!(
            line(State::Incomplete, Parent::Unknown).to_string(),
            format!("snap\\ 1\\377\t{U}\t7\t?\tincomplete")
        );
    }

    #[test]
    fn the_end_line_counts_in_words() {
        assert_eq!(
            End { subvolumes: 1 }.to_string(),
            "# end of list: 1 subvolume"
        );
        assert_eq!(
            End { subvolumes: 0 }.to_string(),
            "# end of list: 0 subvolumes"
        );
        for n in [0, 1, 2] {
            let e = End { subvolumes: n };
            assert_eq!(End::parse(&e.to_string()), Ok(Some(e)));
        }
        assert_eq!(End::parse("# end of list: two subvolumes"), Err(NotALine));
        assert_eq!(
            End::parse(&format!("# end of list: 1\t{U}\t1\t-\tcomplete")),
            Ok(None)
        );
    }

    #[cfg(feature = "json")]
    #[test]
    fn the_json_form_reads_back() {
        let receiving = State::Receiving(Receiver {
            pid: Some(42),
            who: None,
        });
        for l in [
            line(State::Complete, Parent::Full),
            line(State::Resumable, Parent::Unknown),
            line(receiving, Parent::Of(Uuid::from_u128(9))),
        ] {
            assert_eq!(Line::parse(&l.to_json()), Ok(l.clone()));
        }
        let e = End { subvolumes: 3 };
        assert_eq!(e.to_json(), "{\"end\":true,\"subvolumes\":3}");
        assert_eq!(End::parse(&e.to_json()), Ok(Some(e)));
    }
}
