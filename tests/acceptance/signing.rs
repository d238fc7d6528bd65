//! Signed acceptance: DSSE envelopes with ed25519 over the record and the in-toto
//! statement, checked here by an independent implementation of the DSSE pre-authentication
//! encoding, and refused when the payload, the signature, the key id or the key is wrong.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kleene::acceptance::{
    IN_TOTO_PAYLOAD_TYPE, RECORD_PAYLOAD_TYPE, SignedError, StoredRecord, accept, export,
    verify_signed_archive,
};
use kleene::signing::{Envelope, SignatureError, SigningKey, pae};
use proptest::prelude::*;
use serde_json::Value;
use sha2::Digest as _;

use crate::acceptance::records::{binding, build};

fn key(n: u8) -> SigningKey {
    SigningKey::from_seed([n; 32])
}

/// DSSE v1 as its specification states it, written without kleene.
fn independent_pae(payload_type: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type);
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// Verifies an envelope's JSON with ed25519-dalek directly: what an in-toto verifier does.
fn independently_verified(json: &str, public_raw: &[u8; 32]) -> Vec<u8> {
    let v: Value = serde_json::from_str(json).unwrap();
    let payload = BASE64.decode(v["payload"].as_str().unwrap()).unwrap();
    let payload_type = v["payloadType"].as_str().unwrap();
    let signatures = v["signatures"].as_array().unwrap();
    assert_eq!(signatures.len(), 1);
    let keyid: String = sha2::Sha256::digest(public_raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(signatures[0]["keyid"], keyid);
    let sig: [u8; 64] = BASE64
        .decode(signatures[0]["sig"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let verifying = ed25519_dalek::VerifyingKey::from_bytes(public_raw).unwrap();
    verifying
        .verify_strict(
            &independent_pae(payload_type.as_bytes(), &payload),
            &ed25519_dalek::Signature::from_bytes(&sig),
        )
        .unwrap();
    payload
}

fn raw_public(key: &SigningKey) -> [u8; 32] {
    // The public key file is SPKI DER: a 12-byte prefix, then the raw key.
    let pem = key.public_key().to_pem();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = BASE64.decode(body).unwrap();
    der[12..].try_into().unwrap()
}

#[test]
fn the_signed_record_and_statement_verify_independently() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let archive = export(&record, &b.snapshot).unwrap();
    let key = key(1);

    let record_envelope = record.sign(&key);
    assert_eq!(record_envelope.payload_type(), RECORD_PAYLOAD_TYPE);
    let payload = independently_verified(&record_envelope.to_json(), &raw_public(&key));
    assert_eq!(payload, record.to_json().into_bytes());
    let read = Envelope::from_json(&record_envelope.to_json()).unwrap();
    let stored = StoredRecord::from_signed(&read, &key.public_key()).unwrap();
    assert_eq!(stored.digest(), record.digest());

    let statement = archive.verified().signed_statement(&key);
    assert_eq!(statement.payload_type(), IN_TOTO_PAYLOAD_TYPE);
    let payload = independently_verified(&statement.to_json(), &raw_public(&key));
    let v: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(v["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(v["predicate"]["record_digest"], record.digest().to_string());
    let verified =
        verify_signed_archive(archive.as_bytes(), &statement, &key.public_key()).unwrap();
    assert_eq!(verified.record_digest(), record.digest());
}

/// Rewrites one field of an envelope's JSON.
fn altered(envelope: &Envelope, edit: impl FnOnce(&mut Value)) -> Envelope {
    let mut v: Value = serde_json::from_str(&envelope.to_json()).unwrap();
    edit(&mut v);
    Envelope::from_json(&v.to_string()).unwrap()
}

#[test]
fn an_altered_envelope_or_another_key_is_refused() {
    let b = build();
    let record = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    let archive = export(&record, &b.snapshot).unwrap();
    let key = key(1);
    let public = key.public_key();
    let envelope = archive.verified().signed_statement(&key);

    let forged_payload = altered(&envelope, |v| {
        let mut payload = BASE64.decode(v["payload"].as_str().unwrap()).unwrap();
        let at = payload.len() / 2;
        payload[at] ^= 1;
        v["payload"] = BASE64.encode(payload).into();
    });
    let forged_sig = altered(&envelope, |v| {
        let mut sig = BASE64
            .decode(v["signatures"][0]["sig"].as_str().unwrap())
            .unwrap();
        sig[0] ^= 1;
        v["signatures"][0]["sig"] = BASE64.encode(sig).into();
    });
    let forged_type = altered(&envelope, |v| v["payloadType"] = RECORD_PAYLOAD_TYPE.into());
    let forged_keyid = altered(&envelope, |v| {
        v["signatures"][0]["keyid"] = "0".repeat(64).into()
    });
    let unsigned = altered(&envelope, |v| v["signatures"] = Value::Array(vec![]));

    for (what, forged) in [
        ("payload", &forged_payload),
        ("signature", &forged_sig),
        ("payload type", &forged_type),
    ] {
        let err = public.verify(forged).unwrap_err();
        assert_eq!(
            err,
            SignatureError::Invalid {
                key_id: public.key_id()
            },
            "{what}"
        );
        assert!(err.to_string().contains("altered"), "{what}: {err}");
        assert!(matches!(
            verify_signed_archive(archive.as_bytes(), forged, &public),
            Err(SignedError::Signature(SignatureError::Invalid { .. }))
        ));
    }
    for (what, forged) in [("key id", &forged_keyid), ("no signature", &unsigned)] {
        assert!(
            matches!(
                public.verify(forged),
                Err(SignatureError::NotSignedBy { .. })
            ),
            "{what}"
        );
    }
    let stranger = SigningKey::from_seed([2; 32]).public_key();
    let err = stranger.verify(&envelope).unwrap_err();
    assert!(
        matches!(&err, SignatureError::NotSignedBy { key_id, found }
            if *key_id == stranger.key_id() && *found == [public.key_id()]),
        "{err:?}"
    );
    assert!(matches!(
        verify_signed_archive(archive.as_bytes(), &envelope, &stranger),
        Err(SignedError::Signature(SignatureError::NotSignedBy { .. }))
    ));
    // The record's envelope is validly signed, but is not a statement.
    assert!(matches!(
        verify_signed_archive(archive.as_bytes(), &record.sign(&key), &public),
        Err(SignedError::PayloadType { .. })
    ));
    // A signed statement does not vouch for other archive bytes.
    let mut damaged = archive.as_bytes().to_vec();
    let last = damaged.len() - 1;
    damaged[last] = 1;
    assert!(matches!(
        verify_signed_archive(&damaged, &envelope, &public),
        Err(SignedError::Archive(_))
    ));
}

proptest! {
    // Ed25519 in a debug build costs milliseconds per case.
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn signing_round_trips_and_any_changed_byte_is_refused(
        payload in proptest::collection::vec(any::<u8>(), 1..200),
        payload_type in "[a-z/+.-]{1,40}",
        seed in any::<[u8; 32]>(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let key = SigningKey::from_seed(seed);
        let envelope = key.sign(&payload_type, &payload);
        prop_assert_eq!(pae(&payload_type, &payload), independent_pae(payload_type.as_bytes(), &payload));
        let read = Envelope::from_json(&envelope.to_json()).unwrap();
        prop_assert_eq!(key.public_key().verify(&read).unwrap(), &payload[..]);
        let mut changed = payload.clone();
        changed[at.index(payload.len())] ^= flip;
        let forged = altered(&read, |v| v["payload"] = BASE64.encode(&changed).into());
        prop_assert!(key.public_key().verify(&forged).is_err());
    }
}

/// Records and envelopes written by earlier builds keep loading: the record format 1 and
/// the DSSE envelope (signed with the key of seed `[1; 32]`) are pinned as fixtures.
#[test]
fn fixtures_of_the_record_and_its_envelope_still_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/acceptance");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let record = StoredRecord::from_json(&read("record-v1.json")).unwrap();
    assert_eq!(record.task_results().len(), 5);
    let public = kleene::signing::PublicKey::from_pem(&read("signer.pub")).unwrap();
    assert_eq!(public, key(1).public_key());
    let envelope = Envelope::from_json(&read("record-v1.dsse.json")).unwrap();
    let signed = StoredRecord::from_signed(&envelope, &public).unwrap();
    assert_eq!(signed, record);
    // Ed25519 signatures are deterministic: signing the same record again gives the
    // same envelope, byte for byte (this build writes format 2, so only while the fixture's
    // record is still what acceptance makes).
    let b = build();
    let fresh = accept(&b.plan, &b.evidence, &b.snapshot, &binding(&b)).unwrap();
    if fresh.digest() == record.digest() {
        assert_eq!(fresh.sign(&key(1)).to_json(), read("record-v1.dsse.json"));
    }
}
