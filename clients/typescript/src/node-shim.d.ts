// The few Node built-ins this package touches, typed by hand so that the only
// devDependency is typescript itself (no @types/node). Not emitted to dist/.
declare module "node:fs" {
  export function readFileSync(path: string, encoding: "utf8"): string;
}
declare module "node:os" {
  export function homedir(): string;
}
declare module "node:path" {
  export function join(...parts: string[]): string;
}
declare const process: {
  env: Record<string, string | undefined>;
};
