//! Key order across batches: a batch that holds a key waits for the earlier
//! batch in flight with that key, so writes of one key land in record order
//! (the later record wins). A claim is released when its guard drops, so a
//! write task that fails or panics never leaves its keys locked.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// Keys of the batches in flight for one table, with the batch's id and
/// completion token.
#[derive(Debug, Default)]
pub struct KeyLocks {
    in_flight: Mutex<HashMap<String, (u64, CancellationToken)>>,
}

/// The keys a batch in flight holds; released on drop.
#[derive(Debug)]
pub struct Claim {
    locks: Arc<KeyLocks>,
    id: u64,
    keys: Vec<String>,
    done: CancellationToken,
}

impl KeyLocks {
    fn map(&self) -> MutexGuard<'_, HashMap<String, (u64, CancellationToken)>> {
        self.in_flight.lock()
    }

    /// Completion tokens of the batches in flight sharing a key with `keys`.
    pub fn conflicts<'a>(&self, keys: impl Iterator<Item = &'a String>) -> Vec<CancellationToken> {
        let map = self.map();
        let mut out: HashMap<u64, CancellationToken> = HashMap::new();
        for k in keys {
            if let Some((id, done)) = map.get(k) {
                if !done.is_cancelled() {
                    out.entry(*id).or_insert_with(|| done.clone());
                }
            }
        }
        out.into_values().collect()
    }

    /// Waits until no batch in flight holds one of `keys`.
    pub async fn wait_for(&self, keys: &[String]) {
        for earlier in self.conflicts(keys.iter()) {
            earlier.cancelled().await;
        }
    }

    /// Claims `keys` for batch `id` until the returned guard drops.
    pub fn claim(self: &Arc<Self>, id: u64, keys: Vec<String>) -> Claim {
        let done = CancellationToken::new();
        {
            let mut map = self.map();
            for k in &keys {
                map.insert(k.clone(), (id, done.clone()));
            }
        }
        Claim {
            locks: self.clone(),
            id,
            keys,
            done,
        }
    }

    /// Keys held right now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.map().len()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self.locks.map();
        for k in &self.keys {
            if map.get(k).is_some_and(|(owner, _)| *owner == self.id) {
                map.remove(k);
            }
        }
        drop(map);
        self.done.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_batch_waits_for_the_earlier_one_with_its_key() {
        let locks = Arc::new(KeyLocks::default());
        let first = locks.claim(1, keys(&["a", "b"]));
        assert_eq!(locks.conflicts(keys(&["b", "c"]).iter()).len(), 1);
        assert!(locks.conflicts(keys(&["c"]).iter()).is_empty());
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.wait_for(&keys(&["b"])).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(first);
        waiter.await.unwrap();
        assert_eq!(locks.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_holder_releases_its_keys() {
        let locks = Arc::new(KeyLocks::default());
        let claim = locks.claim(1, keys(&["a"]));
        let task = tokio::spawn(async move {
            let _claim = claim;
            panic!("write task failed");
        });
        assert!(task.await.unwrap_err().is_panic());
        locks.wait_for(&keys(&["a"])).await;
        assert_eq!(locks.held(), 0);
    }

    #[test]
    fn a_newer_claim_on_a_key_survives_the_older_release() {
        let locks = Arc::new(KeyLocks::default());
        let old = locks.claim(1, keys(&["a"]));
        let new = locks.claim(2, keys(&["a"]));
        drop(old);
        assert_eq!(locks.conflicts(keys(&["a"]).iter()).len(), 1);
        drop(new);
        assert_eq!(locks.held(), 0);
    }
}
