//! One request's making and reading, item by item: which items of a batch
//! the next request carries (hot keys' as the hot range's pace lets them
//! go, then cold ones in the room left), and what its answer tells the hot
//! range and the table's strategy. Pure (time and the hot range's pace
//! come from the caller): the writer (`sink::writer`) and `ingest sim` both
//! use it, so the simulator's clients make and read requests as a worker
//! does.

use std::time::Duration;

use super::adaptive::size::Room;
use super::control::Throttled;
use super::hot::{self, key_range_refused, Sent};

/// The next request out of a batch's items, within the table's request size
/// `limit`: hot keys' items first, each only as the hot range's pace lets
/// it go (`admit(i)`, for item `i`: hot units leave spread, not in bursts),
/// then the cold ones, from anywhere in the batch (items behind held hot
/// ones are not held up, nor is the request's room left to them: with half
/// a batch's keys hot and requests of a few units, the held hot items took
/// most of each request's room, and the cold ones left one or two a
/// request, at a rate of requests the job could not exceed). The cold ones
/// after the hot tell a table that ran out from a key range.
///
/// Returns the indices sent (in the order they go), the rest (the held hot
/// ones, then the cold ones that did not fit), and, when nothing may go
/// (only hot items left, none due), how long until one may.
pub fn compose(
    units: &[f64],
    hot: &[bool],
    limit: Option<f64>,
    mut admit: impl FnMut(usize) -> Result<(), Duration>,
) -> (Vec<usize>, Vec<usize>, Duration) {
    let mut room = Room::new(limit);
    let (mut send, mut cold, mut held) = (Vec::new(), Vec::new(), Vec::new());
    let mut wait = None;
    for (i, (&u, &h)) in units.iter().zip(hot).enumerate() {
        if !h {
            cold.push(i);
        } else if wait.is_some() || !room.fits(u) {
            held.push(i);
        } else {
            match admit(i) {
                Ok(()) => {
                    room.take(u);
                    send.push(i);
                }
                Err(w) => {
                    wait = Some(w);
                    held.push(i);
                }
            }
        }
    }
    // The cold ones as many as fit, in order (all of a batch's items when
    // none is hot, as `leading_within` counts them).
    let mut later = Vec::new();
    for i in cold {
        if later.is_empty() && room.fits(units[i]) {
            room.take(units[i]);
            send.push(i);
        } else {
            later.push(i);
        }
    }
    held.extend(later);
    let wait = if send.is_empty() {
        wait.unwrap_or_default()
    } else {
        Duration::ZERO
    };
    (send, held, wait)
}

/// Who refused what an answer returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The table (or unknown: unmatched unprocessed items).
    Table,
    /// A 400 whose reasons all name a key range.
    KeyRange,
    /// A partial answer: read item by item ([`key_range_refused`]).
    Partial,
}

/// One item of an answered request.
#[derive(Debug, Clone, Copy)]
pub struct Item<'k> {
    /// Its partition key (as the hot range knows keys).
    pub key: &'k str,
    pub units: f64,
    /// Came back unprocessed (or the whole request was refused).
    pub refused: bool,
    /// Its key was hot when the request left.
    pub hot: bool,
}

/// What an answer says, before the hot range and the table's strategy hear
/// it (see [`read`]).
#[derive(Debug, Clone)]
pub struct Read<'k> {
    /// What the hot range hears (`now` and `table_rate` are the caller's to
    /// fill in); None when it hears nothing (no hot key in the request and
    /// no key range's refusal).
    pub range: Option<hot::Answer<'k>>,
    /// Refused units the hot range answers for (not the table's signal).
    pub apart: f64,
    /// Some refusal is the table's signal.
    pub table_refused: bool,
    /// Some refusal was read as no key range's at all.
    pub by_table: bool,
    /// Some refusal was read as a key range's.
    pub by_range: bool,
    /// Units sent and written (by the items' own cost).
    pub sent: f64,
    pub written: f64,
}

impl Read<'_> {
    /// What the table's strategy hears: (throttled, units sent apart from
    /// those the hot range answers for); None when only keys the hot range
    /// answers for were refused and nothing was written. `range_holds`: the
    /// hot range held records back lately ([`hot::HotKeys::holds`]): only
    /// key ranges refusing is then a plain cut of the table's rate (what the
    /// job wrote is the range's pace); otherwise the table's, down to what
    /// it accepted (a range of ever-new keys, or an index's, admits no more).
    pub fn for_table(&self, range_holds: bool) -> Option<(Throttled, f64)> {
        let nothing_for_table = self.apart > 0.0 && !self.table_refused && self.written == 0.0;
        let throttled = match (self.table_refused, self.by_table) {
            (false, _) => Throttled::No,
            (true, false) if range_holds => Throttled::KeyRange,
            (true, _) if self.by_range => Throttled::NewKeys,
            (true, _) => Throttled::Table,
        };
        (!nothing_for_table).then_some((throttled, self.sent - self.apart))
    }
}

/// Reads an answer item by item (see `hot`'s module doc for which refusals
/// are a key range's). `paces_hot_keys`: the hot range is on (off, every
/// refusal is the table's). `index_bound(i)`: item `i` reaches a global
/// index near its bound, so that in a partial answer its refusal may be the
/// index's, which is the table's signal, not a key range's (not asked of a
/// key already hot: its range is known to refuse). `sent_at`: when the
/// request left.
pub fn read<'k>(
    items: &[Item<'k>],
    reading: Reading,
    paces_hot_keys: bool,
    mut index_bound: impl FnMut(usize) -> bool,
    sent_at: Duration,
) -> Read<'k> {
    let sent: f64 = items.iter().map(|i| i.units).sum();
    let written: f64 = items.iter().filter(|i| !i.refused).map(|i| i.units).sum();
    let by_range: Vec<bool> = match reading {
        _ if !paces_hot_keys => vec![false; items.len()],
        Reading::Table => vec![false; items.len()],
        Reading::KeyRange => vec![true; items.len()],
        Reading::Partial => {
            let sent: Vec<Sent> = items
                .iter()
                .map(|i| Sent {
                    units: i.units,
                    accepted: !i.refused,
                    hot: i.hot,
                })
                .collect();
            key_range_refused(&sent)
                .into_iter()
                .enumerate()
                .map(|(i, by)| by && (items[i].hot || !index_bound(i)))
                .collect()
        }
    };
    let mut range = hot::Answer {
        sent: sent_at,
        request_units: sent,
        ..hot::Answer::default()
    };
    // A key refused alongside hot keys by the same ranges is taken for one
    // of theirs; keys refused alone, all new, say something the hot range
    // does not cover: the table slows too.
    let range_over = items
        .iter()
        .zip(&by_range)
        .any(|(i, by)| i.refused && *by && i.hot);
    let (mut table_refused, mut by_table, mut apart) = (false, false, 0.0);
    for (i, by) in items.iter().zip(&by_range) {
        if !i.refused {
            if i.hot {
                range.hot_written += i.units;
            }
            continue;
        }
        range.cold_refused |= !i.hot;
        if *by {
            range.refused.push(hot::Refused {
                key: i.key,
                units: i.units,
                was_hot: i.hot,
            });
        }
        if *by && (i.hot || range_over) {
            apart += i.units;
        } else {
            table_refused = true;
            by_table |= !*by;
        }
    }
    let by_range = !range.refused.is_empty();
    let heard = items.iter().any(|i| i.hot) || by_range;
    Read {
        range: heard.then_some(range),
        apart,
        table_refused,
        by_table,
        by_range,
        sent,
        written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn hot_items_go_first_as_their_pace_lets_them_and_cold_ones_fill_the_room() {
        // Items 1 and 3 are hot; the pace lets one hot item go now.
        let units = [2.0, 1.0, 3.0, 1.0, 2.0];
        let hot = [false, true, false, true, false];
        let mut due = 1;
        let admit = |_: usize| {
            if due > 0 {
                due -= 1;
                Ok(())
            } else {
                Err(ms(40))
            }
        };
        let (send, rest, wait) = compose(&units, &hot, Some(4.0), admit);
        // The admitted hot item, then cold ones in order while they fit:
        // 1 + 2 = 3, the 3-unit one does not fit, and none after it goes.
        assert_eq!(send, vec![1, 0]);
        assert_eq!(
            rest,
            vec![3, 2, 4],
            "held hot ones first, then the cold left"
        );
        assert_eq!(wait, Duration::ZERO, "something goes: no wait");
    }

    #[test]
    fn only_hot_items_not_yet_due_make_an_empty_request_and_a_wait() {
        let (send, rest, wait) = compose(&[1.0, 1.0], &[true, true], None, |_| Err(ms(25)));
        assert!(send.is_empty());
        assert_eq!(rest, vec![0, 1]);
        assert_eq!(wait, ms(25));
        // Without a limit and no hot key, the whole batch goes.
        let (send, rest, _) = compose(&[5.0, 5.0, 5.0], &[false; 3], None, |_| Ok(()));
        assert_eq!((send, rest), (vec![0, 1, 2], vec![]));
    }

    fn item(key: &str, units: f64, refused: bool, hot: bool) -> Item<'_> {
        Item {
            key,
            units,
            refused,
            hot,
        }
    }

    #[test]
    fn a_hot_key_refused_before_an_accepted_item_is_the_range_s_not_the_table_s() {
        let items = [
            item("whale", 2.0, true, true),
            item("a", 2.0, false, false),
            item("b", 1.0, false, false),
        ];
        let r = read(&items, Reading::Partial, true, |_| false, ms(7));
        let range = r.range.as_ref().expect("the hot range hears it");
        assert_eq!(range.refused.len(), 1);
        assert_eq!(range.refused[0].key, "whale");
        assert_eq!((range.sent, range.request_units), (ms(7), 5.0));
        assert_eq!((r.apart, r.written, r.sent), (2.0, 3.0, 5.0));
        // Not the table's signal: the table hears an unthrottled request
        // of the units it answers for.
        assert_eq!(r.for_table(true), Some((Throttled::No, 3.0)));
    }

    #[test]
    fn a_cold_key_refused_at_the_end_is_the_table_running_out() {
        let items = [item("a", 1.0, false, false), item("b", 5.0, true, false)];
        let r = read(&items, Reading::Partial, true, |_| false, ms(0));
        assert!(r.range.is_none(), "no hot key, no key range's refusal");
        assert_eq!(r.for_table(false), Some((Throttled::Table, 6.0)));
        // A 400 whose reasons all name a key range: every item the range's.
        let all = [item("a", 1.0, true, false), item("b", 2.0, true, false)];
        let r = read(&all, Reading::KeyRange, true, |_| false, ms(0));
        assert_eq!(r.range.as_ref().map(|a| a.refused.len()), Some(2));
        // New keys refused alone: the table slows too (NewKeys), unless the
        // hot range holds records back (then a plain cut, KeyRange).
        assert_eq!(r.for_table(false), Some((Throttled::NewKeys, 3.0)));
        assert_eq!(r.for_table(true), Some((Throttled::KeyRange, 3.0)));
        // Only the range's keys refused and nothing written: nothing for
        // the table.
        let hot = [item("w", 1.0, true, true)];
        let r = read(&hot, Reading::KeyRange, true, |_| false, ms(0));
        assert_eq!(r.for_table(false), None);
        // With the hot range off, every refusal is the table's.
        let r = read(&all, Reading::KeyRange, false, |_| false, ms(0));
        assert!(r.range.is_none());
        assert_eq!(r.for_table(false), Some((Throttled::Table, 3.0)));
    }

    #[test]
    fn an_item_near_a_binding_index_refused_is_the_table_s_signal() {
        let items = [item("a", 2.0, true, false), item("b", 2.0, false, false)];
        let by_range = read(&items, Reading::Partial, true, |_| false, ms(0));
        assert!(by_range.by_range);
        let by_index = read(&items, Reading::Partial, true, |_| true, ms(0));
        assert!(!by_index.by_range && by_index.by_table);
        assert_eq!(by_index.for_table(false), Some((Throttled::Table, 4.0)));
    }
}
