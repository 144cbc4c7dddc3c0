//! `--shard I/N`: the traces whose position modulo N is I (I counts from 1), so N machines together
//! run every trace exactly once.

use std::fmt;
use std::str::FromStr;

/// One shard of a suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 1 to `count`.
    pub index: usize,
    /// How many shards the suite is split into.
    pub count: usize,
}

impl Shard {
    /// The whole suite.
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// Whether the trace at `position` (0-based, in the suite's stable order) belongs to this shard.
    pub fn contains(self, position: usize) -> bool {
        position % self.count == self.index - 1
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| format!("shard `{text}` is not of the form I/N, for example 1/4"))?;
        let index: usize = i
            .trim()
            .parse()
            .map_err(|_| format!("shard index `{i}` is not a number"))?;
        let count: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("shard count `{n}` is not a number"))?;
        if count == 0 || index == 0 || index > count {
            return Err(format!("shard `{text}`: need 1 <= I <= N"));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn shards_partition_the_suite() {
        let shards: Vec<Shard> = (1..=3).map(|i| format!("{i}/3").parse().unwrap()).collect();
        for position in 0..30 {
            assert_eq!(shards.iter().filter(|s| s.contains(position)).count(), 1);
        }
    }

    #[test]
    fn malformed_shards_are_refused_with_a_reason() {
        assert!("0/3".parse::<Shard>().unwrap_err().contains("1 <= I <= N"));
        assert!("4/3".parse::<Shard>().is_err());
        assert!("x/3".parse::<Shard>().unwrap_err().contains("not a number"));
        assert!("3".parse::<Shard>().unwrap_err().contains("I/N"));
    }
}
