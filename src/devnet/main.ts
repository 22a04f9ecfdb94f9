// Entry point for `npm run devnet` (intended script: "tsx src/devnet/main.ts"):
// starts the devnet, prints how to reach it, and runs until interrupted.
import { startDevnet } from './index.js';

const devnet = await startDevnet();

console.log(
  JSON.stringify(
    {
      rpcUrl: devnet.rpcUrl,
      facilitatorUrl: devnet.facilitatorUrl,
      chainId: 8453,
      network: 'eip155:8453',
      usdcAddress: devnet.usdcAddress,
      multicall3Address: devnet.multicall3Address,
      accounts: devnet.accounts,
    },
    null,
    2,
  ),
);

let shuttingDown = false;
const shutdown = (signal: NodeJS.Signals) => {
  if (shuttingDown) return;
  shuttingDown = true;
  console.error(`\n${signal}: stopping devnet`);
  devnet.stop().then(
    () => process.exit(0),
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
};
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
