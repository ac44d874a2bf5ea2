//! The case registry, one module per area (a module's doc names its id prefix: `channels` holds
//! the `CH-` cases). Ids are stable: a case keeps its id forever.

use std::sync::OnceLock;

use crate::model::Case;

pub mod auth;
pub mod call;
pub mod channels;
pub mod contact;
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
        ]
        .concat()
    })
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
}
