//! Epochs (docs/protocol.md §2, "Epochs"; migration 0012): every fence and slot token carries the
//! database's epoch in its high 32 bits, so that comparing two tokens as numbers compares their
//! epochs first. The epoch is the PostgreSQL WAL timeline minus 1 (plus an operator's offset): it
//! rises at every promotion and point-in-time restore, the events that can forget commits.

use crate::error::Error;
use crate::sql;
use sqlx::{PgPool, Row};

/// A token's epoch is its value shifted right by this many bits; its generation the rest.
pub const EPOCH_SHIFT: u32 = 32;

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
/// the new epoch's wait. Run it before any server serves the restored database.
pub async fn advance_epoch(pool: &PgPool) -> Result<EpochAdvance, Error> {
    let row = sqlx::query(sql::EPOCH_ADVANCE.issue())
        .fetch_one(pool)
        .await?;
    Ok(EpochAdvance {
        before: row.try_get("before")?,
        after: row.try_get("after")?,
    })
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
}
