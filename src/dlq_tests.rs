//! The dead-letter path against a recording fake topic, under paused time.

use super::fake::FakeTopic;
use super::*;
use std::sync::Arc;

fn setup() -> (Arc<FakeTopic>, DeadLetters, Acks, Record) {
    let topic = Arc::new(FakeTopic::default());
    let dlq = DeadLetters::with(topic.clone(), "dlq");
    let acks = Acks::new();
    acks.lock().assign("t", 0, None);
    let at = acks.tracked("t", 0, 7);
    let mut rec = Record::with_value(at, &vec![b'x'; 2_000]);
    rec.headers.push(("trace".into(), Some(b"abc".to_vec())));
    (topic, dlq, acks, rec)
}

fn produce_error(code: RDKafkaErrorCode) -> KafkaError {
    KafkaError::MessageProduction(code)
}

#[tokio::test(start_paused = true)]
async fn a_letter_carries_the_record_and_why() {
    let (topic, dlq, acks, rec) = setup();
    let d = dlq
        .send(&rec, "invalid_json", "expected value", &acks)
        .await;
    assert_eq!(d.unwrap(), Delivery::Sent);
    let sent = topic.sent.lock();
    assert_eq!(sent[0].value.as_deref(), rec.value.as_deref());
    assert_eq!(sent[0].header("trace"), Some(&b"abc"[..]));
    assert_eq!(
        sent[0].header("ingest.error.reason"),
        Some(&b"invalid_json"[..])
    );
    assert_eq!(sent[0].header("ingest.source.offset"), Some(&b"7"[..]));
}

#[tokio::test(start_paused = true)]
async fn too_large_goes_without_its_value() {
    let (topic, dlq, acks, rec) = setup();
    topic
        .errors
        .lock()
        .push_back(produce_error(RDKafkaErrorCode::MessageSizeTooLarge));
    let d = dlq.send(&rec, "item_too_large", "over 400 KB", &acks).await;
    assert_eq!(d.unwrap(), Delivery::SentWithoutValue);
    let sent = topic.sent.lock();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].value, None);
    assert_eq!(sent[0].header("trace"), None);
    assert_eq!(sent[0].header(OMITTED), Some(&b"too_large"[..]));
    assert_eq!(sent[0].header("ingest.value.bytes"), Some(&b"2000"[..]));
    assert_eq!(sent[0].header("ingest.source.topic"), Some(&b"t"[..]));
    assert_eq!(sent[0].header("ingest.source.partition"), Some(&b"0"[..]));
    assert_eq!(sent[0].header("ingest.source.offset"), Some(&b"7"[..]));
}

#[tokio::test(start_paused = true)]
async fn a_topic_that_refuses_for_good_is_an_error_not_a_stall() {
    let (topic, dlq, acks, rec) = setup();
    *topic.always.lock() = Some(produce_error(RDKafkaErrorCode::TopicAuthorizationFailed));
    let err = dlq.send(&rec, "r", "d", &acks).await.unwrap_err();
    assert!(
        err.to_string().contains("dead-letter topic dlq refuses"),
        "{err}"
    );
    assert_eq!(*topic.attempts.lock(), 1);
    // Too large even without the value: refused too.
    *topic.always.lock() = Some(produce_error(RDKafkaErrorCode::MessageSizeTooLarge));
    assert!(dlq.send(&rec, "r", "d", &acks).await.is_err());
    // An unknown topic gets a grace period, then is fatal.
    *topic.always.lock() = Some(produce_error(RDKafkaErrorCode::UnknownTopicOrPartition));
    let started = tokio::time::Instant::now();
    assert!(dlq.send(&rec, "r", "d", &acks).await.is_err());
    let waited = started.elapsed();
    assert!(
        waited >= UNKNOWN_TOPIC_GRACE && waited < UNKNOWN_TOPIC_GRACE * 3,
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn transient_failures_retry_until_the_partition_is_gone() {
    let (topic, dlq, acks, rec) = setup();
    *topic.always.lock() = Some(produce_error(RDKafkaErrorCode::MessageTimedOut));
    let acks = Arc::new(acks);
    let revoker = {
        let acks = acks.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            acks.close_until(&[("t".to_string(), 0)], std::time::Instant::now());
        })
    };
    let started = tokio::time::Instant::now();
    let d = dlq.send(&rec, "r", "d", &acks).await.unwrap();
    assert_eq!(d, Delivery::Abandoned);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(60) && waited < Duration::from_secs(61),
        "woken at the close: {waited:?}"
    );
    assert!(*topic.attempts.lock() > 5);
    revoker.await.unwrap();
}
