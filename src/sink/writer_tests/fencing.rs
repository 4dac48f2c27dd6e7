//! Write-loop tests of ownership and shutdown: revoked and reassigned
//! partitions, the drain, outages, fatal errors, refused dead letters.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_revoked_partition_gets_no_retry() {
    // Without fencing, the retry would land after the next owner's writes.
    let script: Script = Box::new(|_, _| Err(throttled()));
    let mut s = setup(script, exponential(1_000.0), None);
    let slots = s.keys(3);
    let closer = s.close_after(Duration::from_millis(300));
    let started = tokio::time::Instant::now();
    s.write(slots).await.unwrap();
    assert_eq!(s.sink.calls().len(), 1, "no attempt after the revocation");
    assert!(
        started.elapsed() < Duration::from_millis(310),
        "woken at the revocation"
    );
    assert_eq!(s.pending(), 0, "abandoned, not in flight");
    assert_eq!(s.watermark(), Some(0), "nothing committed past them");
    closer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_started_batch_retries_during_the_drain_while_an_attempt_fits() {
    // Throttled twice, then accepted; the revocation's drain leaves 30 s.
    let script = failing_first(2, throttled);
    let mut s = setup(script, exponential(1_000.0), None);
    let slots = s.keys(3);
    let closer = s.after(Duration::from_millis(300), |acks| {
        acks.close_until(&tp(), std::time::Instant::now() + Duration::from_secs(30))
    });
    s.write(slots).await.unwrap();
    assert_eq!(s.sink.calls().len(), 3, "retried within the drain");
    assert_eq!(s.watermark(), Some(3), "written, so committed by the drain");
    closer.await.unwrap();
    // A batch not yet started is not begun once its partition is closing.
    let more = s.keys(2);
    s.write(more).await.unwrap();
    assert_eq!(s.sink.calls().len(), 3);
    assert_eq!(s.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_reassigned_partition_is_not_written_by_the_old_epoch() {
    let script: Script = Box::new(|n, items| {
        Ok(if n == 0 {
            unprocessed(items, |_| true)
        } else {
            BatchOutcome::default()
        })
    });
    let mut s = setup(script, exponential(1_000.0), None);
    let slots = s.keys(2);
    let reassign = s.after(Duration::from_millis(200), |acks| {
        acks.close_until(&tp(), std::time::Instant::now());
        acks.revoke(&tp());
        acks.lock().assign("t", 0, Some(0));
    });
    s.write(slots).await.unwrap();
    reassign.await.unwrap();
    assert_eq!(s.sink.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_an_outage_wait_at_once() {
    // DynamoDB unreachable: transient errors forever.
    let script: Script = Box::new(|_, _| Err(WriteError::Retryable("connect refused".into())));
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(4);
    let closer = s.close_after(Duration::from_secs(30));
    let started = tokio::time::Instant::now();
    s.write(slots).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_millis(30_010),
        "{took:?}"
    );
    assert_eq!(s.pending(), 0);
    closer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_long_pacing_wait_ends_when_the_partition_closes() {
    // The first batch takes the whole burst; the next 25 WCU at 0.5 WCU/s
    // is a 50 s wait; the close comes at 2 s.
    let mut s = setup(
        Box::new(|_, _| Ok(BatchOutcome::default())),
        exponential(100.0),
        Some(0.5),
    );
    let first = s.keys(25);
    s.write(first).await.unwrap();
    let slots = s.batch(
        &(25..50)
            .map(|i| format!(r#"{{"id":"k{i}"}}"#))
            .collect::<Vec<_>>(),
    );
    let closer = s.close_after(Duration::from_secs(2));
    let started = tokio::time::Instant::now();
    s.write(slots).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(2_010),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.sink.calls().len(), 1, "the paced batch was never sent");
    assert_eq!(s.watermark(), Some(25));
    closer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_acks_nothing() {
    let script: Script =
        Box::new(|_, _| Err(WriteError::Fatal("ResourceNotFoundException".into())));
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(3);
    let err = s.write(slots).await.unwrap_err();
    assert!(err.to_string().contains("table tbl"), "{err}");
    assert_eq!(s.watermark(), Some(0));
    assert_eq!(s.pending(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_topic_that_refuses_is_fatal() {
    let script: Script = Box::new(|_, _| Err(WriteError::Rejected("ValidationException".into())));
    let mut s = setup(script, exponential(100.0), None);
    *s.topic.always.lock() = Some(rdkafka::error::KafkaError::MessageProduction(
        rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed,
    ));
    let slots = s.keys(1);
    let err = s.write(slots).await.unwrap_err();
    assert!(matches!(err, FatalWrite::DeadLetters(_)), "{err}");
    assert_eq!(s.watermark(), Some(0));
}
