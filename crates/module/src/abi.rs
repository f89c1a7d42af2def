//! The module ABI, version 1: the integer and text encodings shared by the host
//! ([`crate::WasmPolicy`], [`crate::NativePolicy`]) and the guest side in
//! `sdk/vassal-sdk`. They live in [`vassal_core::abi`], which both sides use (the SDK
//! depends on vassal-core), so that nothing is copied by hand; this module re-exports
//! them under the name the host has always used. docs/modules.md is the reference.

pub use vassal_core::abi::*;
