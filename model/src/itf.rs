//! Any serde value as an ITF value (Apalache ADR-015) in Quint's conventions, and back.
//!
//! What ITF readers (Quint, the Informal Systems `itf` crate) expect, and plain serde JSON is not:
//!
//! | Rust | serde JSON | ITF (this module) |
//! |---|---|---|
//! | `None` / `Some(v)` | `null` / `v` | `{"tag": "None", "value": {}}` / `{"tag": "Some", "value": v}` |
//! | unit variant `A` | `"a"` | `{"tag": "a", "value": {}}` |
//! | variant `A(v)` / `A { f }` | `{"a": v}` / `{"a": {"f": ..}}` | `{"tag": "a", "value": v}` / `{"tag": "a", "value": {"f": ..}}` |
//! | tuple `(a, b)` | `[a, b]` | `{"#tup": [a, b]}` |
//! | map | object | `{"#map": [[k, v], ..]}` |
//!
//! Structs are records, sequences are lists, integers numbers. Every enum is a Quint sum type, so
//! a reader in another language declares each as a tagged union (in Rust, `#[serde(tag = "tag",
//! content = "value")]`, and options with `itf::de::Option`). [`to_serde`] is the inverse, for
//! reading a value back with serde.

use serde::ser::{self, Serialize};
use serde_json::{json, Map, Value};

/// Why a value has no ITF form (a float, or a map key that is not a string or number).
#[derive(Debug)]
pub struct ItfError(String);

impl std::fmt::Display for ItfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ItfError {}

impl ser::Error for ItfError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        ItfError(msg.to_string())
    }
}

/// `value` as an ITF value.
pub fn to_itf<T: Serialize + ?Sized>(value: &T) -> Value {
    value
        .serialize(Itf)
        .expect("the model's types have an ITF form")
}

/// The value of a unit variant and of `None`: the empty record, as Quint writes it.
pub fn unit() -> Value {
    json!({})
}

fn tagged(tag: &str, value: Value) -> Value {
    let mut map = Map::new();
    map.insert("tag".into(), Value::String(tag.into()));
    map.insert("value".into(), value);
    Value::Object(map)
}

/// An ITF value written by [`to_itf`] as the serde JSON of the same Rust value, so that serde
/// reads it back. Sets and tuples become arrays.
pub fn to_serde(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(to_serde).collect()),
        Value::Object(map) => {
            if let Some(Value::Array(items)) = map.get("#tup").or_else(|| map.get("#set")) {
                return Value::Array(items.iter().map(to_serde).collect());
            }
            if let Some(Value::Array(pairs)) = map.get("#map") {
                let mut out = Map::new();
                for pair in pairs {
                    if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                        let key = match to_serde(k) {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        out.insert(key, to_serde(v));
                    }
                }
                return Value::Object(out);
            }
            if let (Some(Value::String(tag)), Some(inner), 2) =
                (map.get("tag"), map.get("value"), map.len())
            {
                return match tag.as_str() {
                    "None" => Value::Null,
                    "Some" => to_serde(inner),
                    _ if *inner == unit() => Value::String(tag.clone()),
                    _ => {
                        let mut out = Map::new();
                        out.insert(tag.clone(), to_serde(inner));
                        Value::Object(out)
                    }
                };
            }
            Value::Object(map.iter().map(|(k, v)| (k.clone(), to_serde(v))).collect())
        }
        other => other.clone(),
    }
}

struct Itf;

/// A list being built; `wrap` makes the finished list a tuple, or a variant of one.
struct Seq {
    items: Vec<Value>,
    wrap: Wrap,
}

enum Wrap {
    List,
    Tuple,
    Variant(&'static str),
}

struct Record {
    fields: Map<String, Value>,
    variant: Option<&'static str>,
}

struct MapOf {
    pairs: Vec<Value>,
    key: Option<Value>,
}

impl ser::Serializer for Itf {
    type Ok = Value;
    type Error = ItfError;
    type SerializeSeq = Seq;
    type SerializeTuple = Seq;
    type SerializeTupleStruct = Seq;
    type SerializeTupleVariant = Seq;
    type SerializeMap = MapOf;
    type SerializeStruct = Record;
    type SerializeStructVariant = Record;

    fn serialize_bool(self, v: bool) -> Result<Value, ItfError> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, ItfError> {
        Ok(json!(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, ItfError> {
        // ITF numbers are 64-bit signed; larger ones are big integers.
        Ok(match i64::try_from(v) {
            Ok(small) => json!(small),
            Err(_) => json!({"#bigint": v.to_string()}),
        })
    }
    fn serialize_f32(self, _: f32) -> Result<Value, ItfError> {
        Err(ItfError("ITF has no floating-point numbers".into()))
    }
    fn serialize_f64(self, _: f64) -> Result<Value, ItfError> {
        Err(ItfError("ITF has no floating-point numbers".into()))
    }
    fn serialize_char(self, v: char) -> Result<Value, ItfError> {
        Ok(Value::String(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, ItfError> {
        Ok(Value::String(v.into()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, ItfError> {
        Ok(Value::Array(v.iter().map(|b| json!(b)).collect()))
    }
    fn serialize_none(self) -> Result<Value, ItfError> {
        Ok(tagged("None", unit()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Value, ItfError> {
        Ok(tagged("Some", v.serialize(Itf)?))
    }
    fn serialize_unit(self) -> Result<Value, ItfError> {
        Ok(unit())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, ItfError> {
        Ok(unit())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value, ItfError> {
        Ok(tagged(variant, unit()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Value, ItfError> {
        v.serialize(Itf)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<Value, ItfError> {
        Ok(tagged(variant, v.serialize(Itf)?))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Seq, ItfError> {
        Ok(Seq {
            items: Vec::with_capacity(len.unwrap_or(0)),
            wrap: Wrap::List,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq, ItfError> {
        Ok(Seq {
            items: Vec::with_capacity(len),
            wrap: Wrap::Tuple,
        })
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq, ItfError> {
        self.serialize_tuple(len)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq, ItfError> {
        Ok(Seq {
            items: Vec::with_capacity(len),
            wrap: Wrap::Variant(variant),
        })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapOf, ItfError> {
        Ok(MapOf {
            pairs: Vec::with_capacity(len.unwrap_or(0)),
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Record, ItfError> {
        Ok(Record {
            fields: Map::new(),
            variant: None,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Record, ItfError> {
        Ok(Record {
            fields: Map::new(),
            variant: Some(variant),
        })
    }
}

impl Seq {
    fn push<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        self.items.push(v.serialize(Itf)?);
        Ok(())
    }
    fn done(self) -> Value {
        let items = Value::Array(self.items);
        match self.wrap {
            Wrap::List => items,
            Wrap::Tuple => json!({ "#tup": items }),
            Wrap::Variant(variant) => tagged(variant, json!({ "#tup": items })),
        }
    }
}

impl ser::SerializeSeq for Seq {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        self.push(v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

impl ser::SerializeTuple for Seq {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        self.push(v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

impl ser::SerializeTupleStruct for Seq {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        self.push(v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

impl ser::SerializeTupleVariant for Seq {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        self.push(v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

impl ser::SerializeMap for MapOf {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), ItfError> {
        self.key = Some(k.serialize(Itf)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), ItfError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| ItfError("a map value without its key".into()))?;
        self.pairs.push(Value::Array(vec![key, v.serialize(Itf)?]));
        Ok(())
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(json!({ "#map": self.pairs }))
    }
}

impl Record {
    fn field<T: Serialize + ?Sized>(&mut self, k: &'static str, v: &T) -> Result<(), ItfError> {
        self.fields.insert(k.into(), v.serialize(Itf)?);
        Ok(())
    }
    fn done(self) -> Value {
        let record = Value::Object(self.fields);
        match self.variant {
            None => record,
            Some(variant) => tagged(variant, record),
        }
    }
}

impl ser::SerializeStruct for Record {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), ItfError> {
        self.field(k, v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

impl ser::SerializeStructVariant for Record {
    type Ok = Value;
    type Error = ItfError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), ItfError> {
        self.field(k, v)
    }
    fn end(self) -> Result<Value, ItfError> {
        Ok(self.done())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Config, LeaseModel};
    use stateright::Model;

    #[test]
    fn options_and_variants_are_tagged_and_read_back() {
        assert_eq!(to_itf(&Some(3u8)), json!({"tag": "Some", "value": 3}));
        assert_eq!(to_itf(&None::<u8>), json!({"tag": "None", "value": {}}));
        assert_eq!(
            to_itf(&Action::Claim { runner: 1 }),
            json!({"tag": "claim", "value": {"runner": 1}})
        );
        assert_eq!(to_itf(&Action::Tick), json!({"tag": "tick", "value": {}}));
        assert_eq!(to_itf(&(1u8, 2u8)), json!({"#tup": [1, 2]}));
        // Every action of a few reachable states reads back through serde.
        let model = LeaseModel::new(Config::one_job());
        let mut state = model.init_state();
        for _ in 0..6 {
            let mut actions = Vec::new();
            model.actions(&state, &mut actions);
            for a in &actions {
                let back: Action = serde_json::from_value(to_serde(&to_itf(a))).unwrap();
                assert_eq!(&back, a);
            }
            state = model.next_state(&state, actions[0].clone()).unwrap();
        }
        let back: crate::State = serde_json::from_value(to_serde(&to_itf(&state))).unwrap();
        assert_eq!(back, state);
    }
}
