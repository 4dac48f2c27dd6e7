//! Unit tests of the offset tracker: watermarks, fencing, positions.

use super::*;
use proptest::prelude::*;

#[test]
fn committed_offset_is_last_written_plus_one() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, None);
    t.track("t", 0, 41).unwrap();
    t.ack("t", 0, 41, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(42));
    assert_eq!(t.to_commit(), vec![(("t".into(), 0), 42)]);
    t.mark_committed("t", 0, 42);
    assert!(t.to_commit().is_empty());
}

#[test]
fn watermark_waits_for_the_gap() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, Some(10));
    for o in 10..15 {
        t.track("t", 0, o).unwrap();
    }
    t.ack("t", 0, 12, e).unwrap();
    t.ack("t", 0, 14, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(10), "10 is not written yet");
    t.ack("t", 0, 10, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(11));
    t.ack("t", 0, 11, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(13));
    t.ack("t", 0, 13, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(15));
    assert_eq!(t.pending("t", 0), 0);
}

#[test]
fn holes_in_offsets_are_not_gaps() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, None);
    t.track("t", 0, 5).unwrap();
    t.track("t", 0, 9).unwrap();
    t.ack("t", 0, 9, e).unwrap();
    t.ack("t", 0, 5, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(10));
}

#[test]
fn stale_epoch_and_revoked_acks_are_ignored() {
    let mut t = OffsetTracker::new();
    let old = t.assign("t", 0, None);
    t.track("t", 0, 0).unwrap();
    t.revoke("t", 0);
    assert!(matches!(
        t.ack("t", 0, 0, old),
        Err(OffsetError::NotAssigned(..))
    ));
    let new = t.assign("t", 0, Some(0));
    t.track("t", 0, 0).unwrap();
    assert!(matches!(
        t.ack("t", 0, 0, old),
        Err(OffsetError::StaleEpoch(..))
    ));
    assert_eq!(t.watermark("t", 0), Some(0));
    t.ack("t", 0, 0, new).unwrap();
    assert_eq!(t.watermark("t", 0), Some(1));
}

#[test]
fn double_ack_and_out_of_order_track_are_refused() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, None);
    t.track("t", 0, 3).unwrap();
    t.track("t", 0, 4).unwrap();
    t.ack("t", 0, 4, e).unwrap();
    assert!(t.ack("t", 0, 4, e).is_err());
    assert!(t.track("t", 0, 4).is_err());
    assert!(t.ack("t", 0, 7, e).is_err());
}

#[test]
fn an_abandoned_record_ends_the_drain_but_blocks_the_watermark() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, Some(0));
    for o in 0..4 {
        t.track("t", 0, o).unwrap();
    }
    assert!(t.is_live("t", 0, e));
    t.close("t", 0);
    assert!(!t.is_live("t", 0, e));
    t.ack("t", 0, 0, e).unwrap();
    t.abandon("t", 0, 1, e).unwrap();
    t.ack("t", 0, 2, e).unwrap();
    t.abandon("t", 0, 3, e).unwrap();
    assert_eq!(t.pending("t", 0), 0, "nothing left in flight");
    assert_eq!(t.watermark("t", 0), Some(1), "offset 1 was never written");
    assert!(t.ack("t", 0, 1, e).is_err(), "settled once");
}

#[test]
fn untrack_drops_held_records_so_drain_can_finish() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, None);
    for o in 0..5 {
        t.track("t", 0, o).unwrap();
    }
    t.ack("t", 0, 0, e).unwrap();
    t.untrack_from("t", 0, 3);
    assert_eq!(t.pending("t", 0), 2);
    t.ack("t", 0, 1, e).unwrap();
    t.ack("t", 0, 2, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(3));
    t.track("t", 0, 3).unwrap();
}

#[test]
fn counts_span_topics_and_forget_revoked_partitions() {
    let mut t = OffsetTracker::new();
    assert!(t.is_empty());
    let a = t.assign("a", 0, None);
    t.assign("b", 3, Some(7));
    t.assign("a", 1, None);
    for o in 0..4 {
        t.track("a", 0, o).unwrap();
    }
    t.track("b", 3, 7).unwrap();
    t.ack("a", 0, 1, a).unwrap();
    assert_eq!(t.pending_total(), 4);
    let all: Vec<(&str, i32)> = t.assigned_iter().collect();
    assert_eq!(all, [("a", 0), ("a", 1), ("b", 3)]);
    assert_eq!(
        t.assigned(),
        [("a".to_string(), 0), ("a".into(), 1), ("b".into(), 3)]
    );
    t.revoke("b", 3);
    assert_eq!(
        t.pending_total(),
        3,
        "a revoked partition's records no longer count"
    );
    t.untrack_from("a", 0, 2);
    assert_eq!(t.pending("a", 0), 1, "offsets 2 and 3 untracked, 1 acked");
    t.revoke("a", 0);
    t.revoke("a", 1);
    assert!(t.is_empty());
    assert_eq!(t.pending_total(), 0);
}

proptest! {
    /// Random offsets (with holes), random completion order, some records
    /// abandoned: the watermark never passes a record that is not acked,
    /// and ends at the first abandoned one, or last offset + 1.
    #[test]
    fn watermark_never_passes_a_gap(
        steps in proptest::collection::vec(1i64..4, 1..60),
        order in any::<proptest::sample::Index>(),
        seed in any::<u64>(),
        abandon_one_in in 0u64..8,
    ) {
        let mut offsets = Vec::new();
        let mut o = 0;
        for s in steps { o += s; offsets.push(o); }
        let mut t = OffsetTracker::new();
        let e = t.assign("t", 1, None);
        for &o in &offsets { t.track("t", 1, o).unwrap(); }
        // A seeded shuffle of the completion order.
        let mut completion = offsets.clone();
        let mut x = seed ^ order.index(usize::MAX) as u64;
        for i in (1..completion.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            completion.swap(i, (x >> 33) as usize % (i + 1));
        }
        let mut acked = std::collections::BTreeSet::new();
        let mut abandoned = std::collections::BTreeSet::new();
        for &o in &completion {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if abandon_one_in > 0 && (x >> 33) % abandon_one_in == 0 {
                t.abandon("t", 1, o, e).unwrap();
                abandoned.insert(o);
            } else {
                t.ack("t", 1, o, e).unwrap();
                acked.insert(o);
            }
            // The count in flight is kept, not scanned: it must agree.
            prop_assert_eq!(t.pending("t", 1), offsets.len() - acked.len() - abandoned.len());
            prop_assert_eq!(t.pending_total(), t.pending("t", 1));
            if let Some(w) = t.watermark("t", 1) {
                // Every tracked offset below the watermark is acked.
                for &x in offsets.iter().filter(|&&x| x < w) {
                    prop_assert!(acked.contains(&x));
                }
                // The watermark sits right after an acked record.
                prop_assert!(acked.contains(&(w - 1)));
                // The first record not acked is at or after the watermark.
                if let Some(&first) = offsets.iter().find(|x| !acked.contains(x)) {
                    prop_assert!(first >= w);
                }
            }
        }
        prop_assert_eq!(t.pending("t", 1), 0);
        match abandoned.iter().next() {
            None => prop_assert_eq!(t.watermark("t", 1), Some(*offsets.last().unwrap() + 1)),
            Some(&first) => {
                let before = offsets.iter().filter(|&&x| x < first).max();
                prop_assert_eq!(t.watermark("t", 1), before.map(|b| b + 1));
            }
        }
    }
}

#[test]
fn the_position_carries_the_watermark_past_markers_once_all_is_acked() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, Some(0));
    t.track("t", 0, 0).unwrap();
    t.track("t", 0, 1).unwrap();
    // Offset 2 is a commit marker: never delivered; the position is 3.
    assert!(!t.advance_to_position("t", 0, 3), "records still pending");
    t.ack("t", 0, 1, e).unwrap();
    assert!(!t.advance_to_position("t", 0, 3), "offset 0 still pending");
    t.ack("t", 0, 0, e).unwrap();
    assert_eq!(t.watermark("t", 0), Some(2));
    assert!(t.advance_to_position("t", 0, 3));
    assert_eq!(t.watermark("t", 0), Some(3));
    assert!(!t.advance_to_position("t", 0, 2), "never backwards");
    // An abandoned record is a gap the next owner must read again.
    t.track("t", 0, 3).unwrap();
    t.close("t", 0);
    t.abandon("t", 0, 3, e).unwrap();
    assert!(!t.advance_to_position("t", 0, 5));
    assert_eq!(t.watermark("t", 0), Some(3));
}

#[test]
fn the_position_never_carries_the_watermark_past_a_dropped_record() {
    // A partition assigned during the shutdown drain: the record polled
    // from it is dropped unwritten, and the consumer's position is past it.
    let mut t = OffsetTracker::new();
    t.assign("t", 0, Some(40));
    t.untrack_from("t", 0, 40);
    assert!(!t.advance_to_position("t", 0, 41));
    assert_eq!(t.watermark("t", 0), Some(40), "offset 40 is read again");
}

#[test]
fn retries_go_on_while_the_drain_leaves_time_for_one_attempt() {
    let mut t = OffsetTracker::new();
    let e = t.assign("t", 0, Some(0));
    let now = std::time::Instant::now();
    let attempt = std::time::Duration::from_secs(10);
    assert!(t.may_retry("t", 0, e, now, attempt));
    t.close_until("t", 0, now + std::time::Duration::from_secs(30));
    assert!(!t.is_live("t", 0, e), "nothing new starts");
    assert!(t.may_retry("t", 0, e, now, attempt));
    let late = now + std::time::Duration::from_secs(25);
    assert!(
        !t.may_retry("t", 0, e, late, attempt),
        "would outlive the drain"
    );
    t.close("t", 0);
    t.revoke("t", 0);
    let e2 = t.assign("t", 0, Some(0));
    assert!(!t.may_retry("t", 0, e, now, attempt), "another assignment");
    assert!(t.may_retry("t", 0, e2, now, attempt));
}
