mod action_key;
mod extensions;
mod plans;
