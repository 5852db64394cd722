export * from "./types.js";
export { defaultConfigPath, loadSdkConfig, parseSdkConfig, type SdkConfig } from "./config.js";
export {
  DaemonClient,
  EventSender,
  RamAKvError,
  MissingChunkHashesError,
  postEvent,
  turnEndPayload,
  hexHash,
  type HttpOptions,
  type SenderOptions,
  type SenderStats,
} from "./client.js";
export {
  initFromConfig,
  initFromPath,
  initWithUrl,
  isEnabled,
  globalSender,
  turnStart,
  turnEnd,
  snapshotRestore,
  sessionFork,
  sessionForkEnd,
  sessionSuspend,
  sessionClose,
  flush,
  droppedCount,
  resetForTests,
} from "./global.js";
export {
  beforeTurn,
  afterTurn,
  onSessionEnd,
  onSessionStart,
  streamChatCompletions,
  runChatTurn,
  type BridgeOptions,
  type ChatCompletionChunk,
  type ChatRequest,
  type ChatTurn,
  type SessionEndEvent,
  type SessionStartEvent,
  type TurnResult,
} from "./bridge.js";
export { iterateSSE } from "./sse.js";
