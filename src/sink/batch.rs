//! Batch assembly under DynamoDB's BatchWriteItem limits: at most 25 items and
//! 16 MB per call, and no two items with the same key in one call. A record
//! whose key is already in the batch replaces the earlier item (the later
//! record wins) and joins its slot, so both offsets are acked by one write.

use std::collections::HashMap;

use crate::decode::{Decoded, Item};
use crate::record::Record;

/// BatchWriteItem's item limit.
pub const MAX_ITEMS: usize = 25;
/// BatchWriteItem's request size limit.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;
/// Allowance for the request's JSON around each item.
const PER_ITEM_OVERHEAD: usize = 128;

/// A record and the item it decoded to.
#[derive(Debug)]
pub struct Entry {
    pub record: Record,
    pub decoded: Decoded,
}

/// One key in a batch: the records that wrote it, in order; the last one's
/// item is what gets written.
#[derive(Debug)]
pub struct Slot {
    pub key: String,
    pub entries: Vec<Entry>,
}

impl Slot {
    pub fn item(&self) -> &Item {
        &self.last().decoded.item
    }

    pub fn wcu(&self) -> u32 {
        self.last().decoded.wcu()
    }

    fn last(&self) -> &Entry {
        self.entries.last().expect("a slot is never empty")
    }

    fn bytes(&self) -> usize {
        self.last().decoded.size + PER_ITEM_OVERHEAD
    }
}

/// Items bound for one table in one BatchWriteItem call.
#[derive(Debug, Default)]
pub struct Batch {
    slots: Vec<Slot>,
    index: HashMap<String, usize>,
    bytes: usize,
}

impl Batch {
    /// Whether `d` cannot join without breaking a limit.
    pub fn cannot_take(&self, d: &Decoded) -> bool {
        let added = d.size + PER_ITEM_OVERHEAD;
        match self.index.get(&d.key) {
            Some(&i) => self.bytes - self.slots[i].bytes() + added > MAX_BYTES,
            None => self.slots.len() >= MAX_ITEMS || self.bytes + added > MAX_BYTES,
        }
    }

    /// Adds an entry; returns true when it replaced an earlier item.
    /// Call [`Batch::cannot_take`] first.
    pub fn push(&mut self, entry: Entry) -> bool {
        let added = entry.decoded.size + PER_ITEM_OVERHEAD;
        if let Some(&i) = self.index.get(&entry.decoded.key) {
            self.bytes = self.bytes - self.slots[i].bytes() + added;
            self.slots[i].entries.push(entry);
            return true;
        }
        self.index
            .insert(entry.decoded.key.clone(), self.slots.len());
        self.bytes += added;
        self.slots.push(Slot {
            key: entry.decoded.key.clone(),
            entries: vec![entry],
        });
        false
    }

    pub fn is_full(&self) -> bool {
        self.slots.len() >= MAX_ITEMS
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn into_slots(self) -> Vec<Slot> {
        self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acks::RecordRef;
    use crate::decode::{decode, Coordinates, KeyAttr, KeyMode, KeySchema, KeyType};

    fn entry(offset: i64, json: &str) -> Entry {
        let schema = KeySchema {
            hash: KeyAttr {
                name: "id".into(),
                kind: KeyType::S,
            },
            range: None,
        };
        let at = Coordinates {
            topic: "t",
            partition: 0,
            offset,
        };
        let decoded = decode(Some(json.as_bytes()), &schema, KeyMode::Record, at).unwrap();
        let at = RecordRef {
            topic: "t".into(),
            partition: 0,
            offset,
            epoch: 1,
        };
        Entry {
            record: Record::with_value(at, json.as_bytes()),
            decoded,
        }
    }

    #[test]
    fn at_most_25_items() {
        let mut b = Batch::default();
        for i in 0..25 {
            let e = entry(i, &format!(r#"{{"id":"k{i}"}}"#));
            assert!(!b.cannot_take(&e.decoded));
            b.push(e);
        }
        assert!(b.is_full());
        assert!(b.cannot_take(&entry(25, r#"{"id":"new"}"#).decoded));
        // A key already in the batch still fits: it replaces.
        assert!(!b.cannot_take(&entry(26, r#"{"id":"k3"}"#).decoded));
    }

    #[test]
    fn the_later_record_wins_and_both_offsets_ride_on_its_slot() {
        let mut b = Batch::default();
        assert!(!b.push(entry(0, r#"{"id":"a","v":1}"#)));
        assert!(!b.push(entry(1, r#"{"id":"b","v":1}"#)));
        assert!(b.push(entry(2, r#"{"id":"a","v":2}"#)));
        assert_eq!(b.len(), 2);
        let slots = b.into_slots();
        assert_eq!(slots[0].item()["v"].as_n().unwrap(), "2");
        let offsets: Vec<i64> = slots[0]
            .entries
            .iter()
            .map(|e| e.record.at.offset)
            .collect();
        assert_eq!(offsets, [0, 2]);
    }

    #[test]
    fn the_16mb_limit_holds() {
        let mut b = Batch::default();
        let pad = "x".repeat(390 * 1024);
        let mut n = 0;
        loop {
            let e = entry(n, &format!(r#"{{"id":"k{n}","p":"{pad}"}}"#));
            if b.cannot_take(&e.decoded) {
                break;
            }
            b.push(e);
            n += 1;
        }
        assert_eq!(
            n, 25,
            "25 x 390 KB fits under 16 MB; the item limit binds first"
        );
        assert!(b.bytes <= MAX_BYTES);
    }
}
