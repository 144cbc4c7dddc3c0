//! Epochs (docs/protocol.md §2, "Epochs"; migration 0012): every fence and slot token carries the
//! database's epoch in its high 32 bits, so that comparing two tokens as numbers compares their
//! epochs first. The epoch is the PostgreSQL WAL timeline minus 1 (plus an operator's offset): it
//! rises at every promotion and point-in-time restore, the events that can forget commits.

use crate::error::Error;
use crate::sql;
use sqlx::{PgPool, Row};

/// A token's epoch is its value shifted right by this many bits; its generation the rest.
pub const EPOCH_SHIFT: u32 = 32;

/// The largest epoch: a token is `epoch * 2^32 + generation` in a signed 64-bit integer, so an
/// epoch holds 31 bits. A step that would create a larger one (an `advance_epoch` over a token
/// of this epoch, an offset that puts the timeline's epoch past it) is refused
/// ([`Error::OutOfRange`]) before anything is written, and a claim in such an epoch fails with
/// a message naming it (migration 0018).
pub const MAX_EPOCH: i64 = (1 << 31) - 1;

/// Whether `epoch` is one a token can carry (0 to [`MAX_EPOCH`]).
pub fn epoch_in_range(epoch: i64) -> bool {
    (0..=MAX_EPOCH).contains(&epoch)
}

/// The epoch of a fence or slot token: its high 32 bits.
pub fn epoch_of(token: i64) -> i64 {
    token >> EPOCH_SHIFT
}

/// The generation of a fence or slot token within its epoch: its low 32 bits.
pub fn generation_of(token: i64) -> i64 {
    token & ((1_i64 << EPOCH_SHIFT) - 1)
}

/// The database's current epoch. An error on a standby (PostgreSQL reads no WAL insert position
/// during recovery).
pub async fn current_epoch(pool: &PgPool) -> Result<i64, Error> {
    Ok(sqlx::query_scalar(sql::EPOCH_SELECT_CURRENT.issue())
        .fetch_one(pool)
        .await?)
}

/// What [`advance_epoch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochAdvance {
    /// The epoch before.
    pub before: i64,
    /// The epoch now: one above every epoch the database had seen and above `before`.
    pub after: i64,
}

/// The operator's step after a restore that kept (or reset) the WAL timeline, such as a logical
/// restore into a new cluster: raise the epoch to one above every epoch the database has seen (its
/// `epochs` table and the high bits of every fence and slot token it holds). The next claim starts
/// the new epoch's wait. Run it before any server serves the restored database. Refused
/// ([`Error::OutOfRange`], nothing written) when the new epoch would be past [`MAX_EPOCH`].
pub async fn advance_epoch(pool: &PgPool) -> Result<EpochAdvance, Error> {
    let row = sqlx::query(sql::EPOCH_ADVANCE.issue())
        .fetch_one(pool)
        .await?;
    let before: i64 = row.try_get("before")?;
    let after: i64 = row.try_get("after")?;
    let offset: Option<i64> = row.try_get("epoch_offset")?;
    if offset.is_none() || !epoch_in_range(after) {
        return Err(Error::OutOfRange(format!(
            "the epoch cannot be advanced: the database holds a fence or slot token of epoch {}, \
             and the next epoch, {after}, is past the largest a token can carry ({MAX_EPOCH}); \
             nothing was written",
            after - 1
        )));
    }
    Ok(EpochAdvance { before, after })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_its_epoch_in_the_high_bits_and_its_generation_in_the_low() {
        let token = 3 * (1_i64 << 32) + 7;
        assert_eq!(epoch_of(token), 3);
        assert_eq!(generation_of(token), 7);
        assert_eq!(epoch_of(7), 0);
        assert_eq!(generation_of(7), 7);
    }

    #[test]
    fn the_largest_epoch_carries_every_generation_in_a_bigint() {
        assert!(epoch_in_range(0) && epoch_in_range(MAX_EPOCH));
        assert!(!epoch_in_range(MAX_EPOCH + 1) && !epoch_in_range(-1));
        assert_eq!(epoch_of(i64::MAX), MAX_EPOCH);
        assert_eq!(generation_of(i64::MAX), (1 << 32) - 1);
    }
}
