//! `#[tool]`: a function becomes a modu `Tool`.
//!
//! ```ignore
//! use modu::tool;
//!
//! /// Add two integers.
//! #[tool(idempotent, timeout_seconds = 5)]
//! async fn add(a: i64, b: i64) -> i64 {
//!     a + b
//! }
//!
//! // `Add` (the function's name in CamelCase) is now a `Tool<C>` for any context `C`:
//! // Agent::builder(model).tool(Add)
//! ```
//!
//! The generated unit struct implements `Tool<C>` for every `C`, or for the one `C` of a first
//! parameter `&RunContext<C>`. Parameters become a JSON object whose schema schemars derives;
//! unknown fields are rejected. Sync functions run on the blocking pool. A function may return
//! any `Serialize` value or a `Result<T, E>` with `E: Into<BoxError>`: a `ToolError` is passed
//! through, other errors go to the `error_mapper` (if any) and otherwise become a generic
//! execution error that reveals nothing of the original to the model. A function that panics,
//! sync or async, fails its call with the execution error `tool_panicked`.
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::{FnArg, ItemFn, LitStr, Pat, ReturnType, Type, parse_macro_input};

#[derive(Default)]
struct Options {
    name: Option<String>,
    idempotent: bool,
    repair_safe: bool,
    timeout_retry_safe: bool,
    needs_approval: bool,
    timeout_seconds: Option<f64>,
    max_result_bytes: Option<u64>,
    error_mapper: Option<syn::Path>,
}

/// Turns a function into a tool. See the crate documentation.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            let lit: LitStr = meta.value()?.parse()?;
            options.name = Some(lit.value());
        } else if meta.path.is_ident("idempotent") {
            options.idempotent = true;
        } else if meta.path.is_ident("repair_safe") {
            options.repair_safe = true;
        } else if meta.path.is_ident("timeout_retry_safe") {
            options.timeout_retry_safe = true;
        } else if meta.path.is_ident("needs_approval") {
            options.needs_approval = true;
        } else if meta.path.is_ident("timeout_seconds") {
            let lit: syn::Lit = meta.value()?.parse()?;
            let seconds = match &lit {
                syn::Lit::Int(i) => i.base10_parse::<u64>()? as f64,
                syn::Lit::Float(f) => f.base10_parse::<f64>()?,
                other => return Err(syn::Error::new_spanned(other, "timeout_seconds takes a number")),
            };
            // Checked here: `Duration::from_secs_f64` would panic when the spec is built.
            if std::time::Duration::try_from_secs_f64(seconds).map_or(true, |d| d.is_zero()) {
                return Err(syn::Error::new_spanned(
                    lit,
                    "timeout_seconds must be more than 0 and fit a Duration",
                ));
            }
            options.timeout_seconds = Some(seconds);
        } else if meta.path.is_ident("max_result_bytes") {
            let lit: syn::LitInt = meta.value()?.parse()?;
            options.max_result_bytes = Some(lit.base10_parse()?);
        } else if meta.path.is_ident("error_mapper") {
            options.error_mapper = Some(meta.value()?.parse()?);
        } else {
            return Err(meta.error(
                "unknown #[tool] option; expected name, idempotent, repair_safe, timeout_retry_safe, needs_approval, timeout_seconds, max_result_bytes or error_mapper",
            ));
        }
        Ok(())
    });
    if let Err(e) = parser.parse(attr) {
        return e.to_compile_error().into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(options, func) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn crate_path() -> TokenStream2 {
    use proc_macro_crate::{FoundCrate, crate_name};
    let inside_core = std::env::var("CARGO_CRATE_NAME").is_ok_and(|n| n == "modu_core");
    if let Ok(found) = crate_name("modu") {
        return match found {
            FoundCrate::Itself => quote!(::modu),
            FoundCrate::Name(n) => {
                let id = format_ident!("{}", n);
                quote!(::#id)
            }
        };
    }
    match crate_name("modu-core") {
        Ok(FoundCrate::Itself) if inside_core => quote!(crate),
        Ok(FoundCrate::Name(n)) => {
            let id = format_ident!("{}", n);
            quote!(::#id)
        }
        _ => quote!(::modu_core),
    }
}

fn camel_case(name: &str) -> String {
    name.split('_')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The doc comment's text as rustdoc reads it: the indentation all its lines share (the space
/// after `///`) taken off, so nested lists and indented code keep theirs.
fn unindent(docs: &[String]) -> String {
    let lines: Vec<&str> = docs.iter().flat_map(|d| d.split('\n')).map(str::trim_end).collect();
    let indent = lines
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or_else(|| l.trim_start()))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_matches('\n')
        .to_owned()
}

/// The `C` of a parameter of type `&RunContext<C>`, if it is one.
fn run_context_type(ty: &Type) -> Option<Type> {
    let Type::Reference(r) = ty else { return None };
    let Type::Path(p) = r.elem.as_ref() else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "RunContext" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        }),
        _ => None,
    }
}

fn returns_result(ret: &ReturnType) -> bool {
    match ret {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => match ty.as_ref() {
            Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
            _ => false,
        },
    }
}

fn expand(options: Options, func: ItemFn) -> syn::Result<TokenStream2> {
    let krate = crate_path();
    let krate_str = krate.to_string().replace(' ', "");
    let serde_path = LitStr::new(&format!("{krate_str}::__private::serde"), Span::call_site());
    let schemars_path = LitStr::new(&format!("{krate_str}::__private::schemars"), Span::call_site());

    if !func.sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &func.sig.generics,
            "#[tool] functions cannot be generic; use a concrete RunContext<C>",
        ));
    }
    let fn_name = &func.sig.ident;
    let vis = &func.vis;
    let is_async = func.sig.asyncness.is_some();
    // `r#match` is the tool `match` and the struct `Match`.
    let plain_name = fn_name.unraw().to_string();
    let tool_name = options.name.clone().unwrap_or_else(|| plain_name.clone());
    let struct_name = syn::parse_str::<syn::Ident>(&camel_case(&plain_name)).map_err(|_| {
        syn::Error::new_spanned(
            fn_name,
            "#[tool] cannot make a struct name of this function's name in CamelCase; rename the function",
        )
    })?;

    let doc_lines = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .collect::<Vec<_>>();
    let description = unindent(&doc_lines);

    let mut context_ty: Option<Type> = None;
    let mut field_names = Vec::new();
    let mut field_types = Vec::new();
    let mut field_locals = Vec::new();
    let mut call_args = Vec::new();
    for (i, input) in func.sig.inputs.iter().enumerate() {
        let FnArg::Typed(pt) = input else {
            return Err(syn::Error::new_spanned(input, "#[tool] functions cannot take self"));
        };
        if i == 0
            && let Some(c) = run_context_type(&pt.ty)
        {
            context_ty = Some(c);
            call_args.push(quote!(__modu_ctx));
            continue;
        }
        if let Type::Reference(r) = pt.ty.as_ref() {
            let message = if run_context_type(&pt.ty).is_some() {
                "#[tool] takes a &RunContext<C> only as the first parameter"
            } else {
                "#[tool] parameters are deserialised from the model's arguments and cannot be borrowed; take an owned type (String, not &str)"
            };
            return Err(syn::Error::new_spanned(r, message));
        }
        let Pat::Ident(pi) = pt.pat.as_ref() else {
            return Err(syn::Error::new_spanned(
                &pt.pat,
                "#[tool] parameters must be plain names",
            ));
        };
        let ident = &pi.ident;
        // Bound to a name of its own: a parameter may share the function's name.
        let local = format_ident!("__modu_arg_{}", i);
        field_names.push(ident.clone());
        field_locals.push(local.clone());
        field_types.push(pt.ty.as_ref().clone());
        call_args.push(quote!(#local));
    }

    let (impl_generics, ctx_ty) = match &context_ty {
        Some(c) => (quote!(), quote!(#c)),
        None => (
            quote!(<__C: ::core::marker::Send + ::core::marker::Sync + 'static>),
            quote!(__C),
        ),
    };

    let wrapper = if returns_result(&func.sig.output) {
        quote!(#krate::__private::Fallible)
    } else {
        quote!(#krate::__private::Plain)
    };

    let invoke = if is_async {
        quote! {
            let __modu_ctx = __modu_run;
            let _ = __modu_ctx;
            // A panic fails the call (`tool_panicked`), as a sync tool's does on the blocking pool.
            let mut __modu_fut = ::core::pin::pin!(#fn_name(#(#call_args),*));
            let __modu_out = ::core::future::poll_fn(|__modu_cx| {
                match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
                    ::core::future::Future::poll(__modu_fut.as_mut(), __modu_cx)
                })) {
                    ::core::result::Result::Ok(::core::task::Poll::Ready(__modu_v)) => {
                        ::core::task::Poll::Ready(::core::option::Option::Some(__modu_v))
                    }
                    ::core::result::Result::Ok(::core::task::Poll::Pending) => ::core::task::Poll::Pending,
                    ::core::result::Result::Err(_) => ::core::task::Poll::Ready(::core::option::Option::None),
                }
            })
            .await;
            let ::core::option::Option::Some(__modu_out) = __modu_out else {
                return ::core::result::Result::Err(#krate::ToolError::execution("tool_panicked"));
            };
            #krate::__private::IntoToolOutput::into_tool_output(#wrapper(__modu_out), __modu_mapper)
        }
    } else {
        quote! {
            let __modu_owned_ctx = ::core::clone::Clone::clone(__modu_run);
            let __modu_result = #krate::tool::run_blocking(move || {
                let __modu_ctx = &__modu_owned_ctx;
                let _ = __modu_ctx;
                let __modu_out = #fn_name(#(#call_args),*);
                #krate::__private::IntoToolOutput::into_tool_output(#wrapper(__modu_out), __modu_mapper_static())
            })
            .await;
            __modu_result
        }
    };

    let mapper_fn = match &options.error_mapper {
        Some(path) => quote! {
            fn __modu_mapper_static() -> ::core::option::Option<&'static #krate::ErrorMapper> {
                static MAPPER: ::std::sync::OnceLock<#krate::ErrorMapper> = ::std::sync::OnceLock::new();
                ::core::option::Option::Some(MAPPER.get_or_init(|| #krate::__private::mapper_from_fn(#path)))
            }
        },
        None => quote! {
            fn __modu_mapper_static() -> ::core::option::Option<&'static #krate::ErrorMapper> {
                ::core::option::Option::None
            }
        },
    };

    let idempotent = options.idempotent;
    let repair_safe = options.repair_safe;
    let timeout_retry_safe = options.timeout_retry_safe;
    let needs_approval = options.needs_approval;
    let blocking = !is_async;
    let timeout = match options.timeout_seconds {
        Some(s) => quote!(.timeout(::std::time::Duration::from_secs_f64(#s))),
        None => quote!(),
    };
    let max_bytes = match options.max_result_bytes {
        Some(n) => {
            let n = n as usize;
            quote!(.max_result_bytes(#n))
        }
        None => quote!(),
    };
    let args_struct = format_ident!("__ModuToolArgs{}", struct_name);
    let doc = format!("The `{tool_name}` tool, generated by `#[tool]` from [`{fn_name}`].");

    Ok(quote! {
        #func

        #[doc = #doc]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #struct_name;

        #[allow(non_camel_case_types, non_snake_case, clippy::all)]
        const _: () = {
            #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
            #[serde(crate = #serde_path, deny_unknown_fields)]
            #[schemars(crate = #schemars_path)]
            struct #args_struct {
                #(#field_names: #field_types,)*
            }

            #mapper_fn

            #[#krate::__private::async_trait]
            impl #impl_generics #krate::Tool<#ctx_ty> for #struct_name {
                fn spec(&self) -> &#krate::ToolSpec {
                    static SPEC: ::std::sync::OnceLock<#krate::ToolSpec> = ::std::sync::OnceLock::new();
                    SPEC.get_or_init(|| {
                        #krate::ToolSpec::for_args::<#args_struct>(#tool_name, #description)
                            .idempotent(#idempotent)
                            .repair_safe(#repair_safe)
                            .timeout_retry_safe(#timeout_retry_safe)
                            .needs_approval(#needs_approval)
                            .blocking(#blocking)
                            #timeout
                            #max_bytes
                    })
                }

                async fn call(
                    &self,
                    __modu_run: &#krate::RunContext<#ctx_ty>,
                    __modu_arguments: #krate::__private::serde_json::Value,
                ) -> ::core::result::Result<#krate::__private::serde_json::Value, #krate::ToolError> {
                    let __modu_mapper = __modu_mapper_static();
                    let _ = &__modu_mapper;
                    let #args_struct { #(#field_names: #field_locals),* } = #krate::tool::parse_arguments::<#args_struct>(__modu_arguments)?;
                    #invoke
                }
            }
        };
    })
}
