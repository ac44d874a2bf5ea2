//! The case registry, one module per area (a module's doc names its id prefix: `channels` holds
//! the `CH-` cases). Ids are stable: a case keeps its id forever.

use std::sync::OnceLock;

use crate::model::Case;

pub mod auth;
pub mod call;
pub mod channels;
pub mod contact;
pub mod durability;
pub mod e2ee;
pub mod errors;
pub mod goaway;
pub mod limits;
pub mod media;
pub mod messaging;
pub mod payments;
pub mod push;
pub mod receipts;
pub mod registration;
pub mod retract;
pub mod trade;
pub mod vanity;
pub mod ws;

/// Every case, in registry order (area by area).
pub fn all() -> &'static [Case] {
    static ALL: OnceLock<Vec<Case>> = OnceLock::new();
    ALL.get_or_init(|| {
        [
            registration::CASES,
            auth::CASES,
            ws::CASES,
            contact::CASES,
            messaging::CASES,
            receipts::CASES,
            retract::CASES,
            goaway::CASES,
            channels::CASES,
            trade::CASES,
            vanity::CASES,
            payments::CASES,
            media::CASES,
            push::CASES,
            call::CASES,
            errors::CASES,
            e2ee::CASES,
            limits::CASES,
            durability::CASES,
        ]
        .concat()
    })
}

/// Why cases cannot be registered ([`with`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The id is not `AREA-NNN` (an area of upper-case letters and digits that starts with a
    /// letter, a dash, three digits).
    #[error("case id {0:?} is not AREA-NNN (upper-case letters and digits, a dash, three digits)")]
    MalformedId(&'static str),
    /// Two cases (built-in or registered) share the id.
    #[error("case id {0} is registered twice")]
    DuplicateId(&'static str),
    /// The case has no source or no statement: every case says what it checks and where that
    /// is stated.
    #[error("case {0} has no source or no statement")]
    Unstated(&'static str),
}

/// Checks one case's id, source and statement.
pub fn check(case: &Case) -> Result<(), RegistryError> {
    let well_formed = case.id.split_once('-').is_some_and(|(area, n)| {
        area.starts_with(|c: char| c.is_ascii_uppercase())
            && area
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            && n.len() == 3
            && n.bytes().all(|b| b.is_ascii_digit())
    });
    if !well_formed {
        return Err(RegistryError::MalformedId(case.id));
    }
    if case.source.trim().is_empty() || case.statement.trim().is_empty() {
        return Err(RegistryError::Unstated(case.id));
    }
    Ok(())
}

/// The built-in cases ([`all`]) followed by `extra`, in order: how a relay team runs cases of
/// its own (the same [`Case`], `case!`, levels, citations, hooks and reports) with the
/// built-in ones. Every extra case is [`check`]ed, and no id may appear twice.
pub fn with(extra: &[&[Case]]) -> Result<Vec<Case>, RegistryError> {
    let mut registry = all().to_vec();
    let mut seen: std::collections::BTreeSet<&'static str> =
        registry.iter().map(|c| c.id).collect();
    for case in extra.iter().flat_map(|cases| cases.iter()) {
        check(case)?;
        if !seen.insert(case.id) {
            return Err(RegistryError::DuplicateId(case.id));
        }
        registry.push(*case);
    }
    Ok(registry)
}

/// Two contacts, both online (ticket sockets, `sync` sent).
pub(crate) async fn online(
    ctx: &mut crate::ctx::Ctx,
) -> Result<(crate::ctx::Pair, crate::ctx::Ws, crate::ctx::Ws), crate::model::Failure> {
    let p = ctx.pair().await?;
    let wa = ctx.connect(&p.a, "A").await?;
    let wb = ctx.connect(&p.b, "B").await?;
    Ok((p, wa, wb))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ids_are_unique_well_formed_and_stated() {
        let mut seen = BTreeSet::new();
        for c in all() {
            assert!(seen.insert(c.id), "duplicate id {}", c.id);
            assert_eq!(check(c), Ok(()));
            let (area, n) = c.id.split_once('-').expect("AREA-NNN");
            assert!(
                area.bytes().all(|b| b.is_ascii_uppercase() || b == b'2'),
                "{}",
                c.id
            );
            assert!(
                n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()),
                "{}",
                c.id
            );
            assert!(!c.statement.is_empty() && !c.source.is_empty(), "{}", c.id);
        }
        assert!(all().len() >= 100, "{} cases", all().len());
    }

    async fn extra_check(_ctx: &mut crate::ctx::Ctx) -> crate::verdict::CaseResult {
        Ok(())
    }

    #[test]
    fn extra_cases_follow_the_built_in_ones_and_are_checked() {
        const EXTRA: &[Case] = &[
            crate::case!("TEAM1-001", Should, "our notes §1", "one", [], extra_check),
            crate::case!("TEAM1-002", Must, "our notes §2", "two", [], extra_check),
        ];
        let registry = with(&[EXTRA]).expect("registered");
        assert_eq!(registry.len(), all().len() + 2);
        assert_eq!(registry[all().len()].id, "TEAM1-001");
        assert_eq!(with(&[]).expect("built-in only").len(), all().len());
        let twice = with(&[EXTRA, EXTRA]);
        assert_eq!(twice.err(), Some(RegistryError::DuplicateId("TEAM1-001")));
        let clash: &[Case] = &[crate::case!("MSG-001", Must, "s", "x", [], extra_check)];
        assert_eq!(
            with(&[clash]).err(),
            Some(RegistryError::DuplicateId("MSG-001"))
        );
        for bad in ["msg-001", "MSG-01", "MSG001", "1MSG-001", "MSG-0011"] {
            let case = Case {
                id: bad,
                ..EXTRA[0]
            };
            assert_eq!(check(&case), Err(RegistryError::MalformedId(bad)), "{bad}");
        }
        let unstated = Case {
            statement: " ",
            ..EXTRA[0]
        };
        assert_eq!(check(&unstated), Err(RegistryError::Unstated("TEAM1-001")));
    }

    /// Every MUST case (documents profile) cites only sections of SPEC.md or PROTOCOL.md that
    /// exist, and nothing of our own relay (ARCHITECTURE.md, `wire::`, an issue).
    #[test]
    fn must_cases_cite_the_documents() {
        let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared");
        let read = |name: &str| {
            std::fs::read_to_string(shared.join(name))
                .unwrap_or_else(|e| panic!("{name} beside the workspace ({e})"))
        };
        let (spec, protocol) = (read("SPEC.md"), read("PROTOCOL.md"));
        for c in all()
            .iter()
            .filter(|c| c.level == crate::model::Level::Must)
        {
            assert!(
                c.source.contains("SPEC §") || c.source.contains("PROTOCOL §"),
                "{}: a MUST cites SPEC or PROTOCOL: {}",
                c.id,
                c.source
            );
            for ours in ["ARCHITECTURE", "wire::", "issue", "DESIGN"] {
                assert!(
                    !c.source.contains(ours),
                    "{}: a MUST never rests on our own choices ({ours}): {}",
                    c.id,
                    c.source
                );
            }
            for part in c.source.split(';') {
                let part = part.trim();
                let (doc, rest) = if let Some(r) = part.strip_prefix("SPEC §") {
                    (&spec, r)
                } else if let Some(r) = part.strip_prefix("PROTOCOL §") {
                    (&protocol, r)
                } else {
                    continue;
                };
                let head = rest.split([' ', ',', '(', '-']).next().unwrap_or_default();
                let found = if head.starts_with(|ch: char| ch.is_ascii_digit()) {
                    doc.contains(&format!("## {head}"))
                        || doc.contains(&format!("### {head}"))
                        || doc.contains(&format!("#### {head}"))
                } else {
                    doc.lines().any(|l| l.starts_with('#') && l.contains(head))
                };
                assert!(
                    found,
                    "{}: section `{head}` is not in the document ({part})",
                    c.id
                );
                for row in rest.split([' ', ',']).filter(|w| {
                    w.len() >= 2
                        && w.len() <= 4
                        && w.starts_with(|ch: char| ch.is_ascii_uppercase())
                        && w[1..]
                            .bytes()
                            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
                        && w.bytes().any(|b| b.is_ascii_digit())
                }) {
                    assert!(
                        doc.contains(&format!("| {row} |")),
                        "{}: row {row} is not in the document ({part})",
                        c.id
                    );
                }
            }
        }
    }
}
